// Wrapper module of the image assembler (hack/image/main.go): go-containerregistry writes the OCI image layout.
// It is its own module so that the project's go.mod does not carry go-containerregistry's dependencies.
module github.com/argocd-pull/argocd-pull/hack/image

go 1.25.0

require github.com/google/go-containerregistry v0.22.1

require (
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	golang.org/x/sync v0.22.0 // indirect
)
