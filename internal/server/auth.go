package server

import (
	"bufio"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpccredentials "google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Identity kinds.
const (
	// KindAgent is the agent of one cluster (consumer).
	KindAgent = "agent"
	// KindSource is one source, such as a hub controller.
	KindSource = "source"
	// KindAdmin uses the REST API: it manages consumers and reads everything. It has no part in the
	// CloudEvents protocol: it can act neither as an agent nor as a source.
	KindAdmin = "admin"
	// kindAnonymous is every caller when authentication is disabled.
	kindAnonymous = "anonymous"
)

// Identity is who a caller is: an agent for cluster Name, a source with ID Name, or an admin.
type Identity struct {
	Kind string
	Name string
}

func (i Identity) String() string {
	if i.Name == "" {
		return i.Kind
	}
	return i.Kind + ":" + i.Name
}

// mayActAsAgent reports whether the caller may subscribe and publish for a cluster: only that cluster's agent.
func (i Identity) mayActAsAgent(cluster string) bool {
	return i.Kind == kindAnonymous || (i.Kind == KindAgent && i.Name == cluster)
}

// mayActAsSource reports whether the caller may publish and subscribe for a source ID: only that source.
func (i Identity) mayActAsSource(source string) bool {
	return i.Kind == kindAnonymous || (i.Kind == KindSource && i.Name == source)
}

// isAdmin reports whether the caller may manage consumers and read everything.
func (i Identity) isAdmin() bool { return i.Kind == kindAnonymous || i.Kind == KindAdmin }

// parseTokens reads a token file: one `token,kind[,name]` per line, kind being agent (name = cluster),
// source (name = source ID) or admin; blank lines and lines starting with # are skipped.
func parseTokens(r io.Reader) (map[string]Identity, error) {
	tokens := map[string]Identity{}
	scanner := bufio.NewScanner(r)
	for line := 1; scanner.Scan(); line++ {
		text := strings.TrimSpace(scanner.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Split(text, ",")
		for i := range fields {
			fields[i] = strings.TrimSpace(fields[i])
		}
		id, err := tokenIdentity(fields)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if _, dup := tokens[fields[0]]; dup {
			return nil, fmt.Errorf("line %d: duplicate token", line)
		}
		tokens[fields[0]] = id
	}
	if err := scanner.Err(); err != nil {
		return nil, fmt.Errorf("read tokens: %w", err)
	}
	return tokens, nil
}

func tokenIdentity(fields []string) (Identity, error) {
	if len(fields) < 2 || fields[0] == "" {
		return Identity{}, fmt.Errorf("want token,kind[,name], got %d fields", len(fields))
	}
	switch kind := fields[1]; kind {
	case KindAdmin:
		if len(fields) != 2 {
			return Identity{}, errors.New("an admin token takes no name: token,admin")
		}
		return Identity{Kind: KindAdmin}, nil
	case KindAgent, KindSource:
		if len(fields) != 3 || fields[2] == "" {
			return Identity{}, fmt.Errorf("%s", map[string]string{
				KindAgent:  "an agent token needs the name of its cluster: token,agent,<cluster>",
				KindSource: "a source token needs its source ID: token,source,<id>",
			}[kind])
		}
		return Identity{Kind: kind, Name: fields[2]}, nil
	default:
		return Identity{}, fmt.Errorf("unknown kind %q (want agent, source or admin)", kind)
	}
}

// ocmAgentPrefix starts the common name of OCM's agent certificates:
// system:open-cluster-management:<cluster>:<agent>.
const ocmAgentPrefix = "system:open-cluster-management:"

// certIdentity maps a verified client certificate to an identity by its common name: agent:<cluster>,
// source:<id>, admin, or OCM's system:open-cluster-management:<cluster>:<agent>.
func certIdentity(cert *x509.Certificate) (Identity, error) {
	cn := cert.Subject.CommonName
	switch {
	case cn == KindAdmin:
		return Identity{Kind: KindAdmin}, nil
	case strings.HasPrefix(cn, KindAgent+":") && len(cn) > len(KindAgent)+1:
		return Identity{Kind: KindAgent, Name: cn[len(KindAgent)+1:]}, nil
	case strings.HasPrefix(cn, KindSource+":") && len(cn) > len(KindSource)+1:
		return Identity{Kind: KindSource, Name: cn[len(KindSource)+1:]}, nil
	case strings.HasPrefix(cn, ocmAgentPrefix):
		parts := strings.Split(cn[len(ocmAgentPrefix):], ":")
		if len(parts) == 2 && parts[0] != "" {
			return Identity{Kind: KindAgent, Name: parts[0]}, nil
		}
	}
	return Identity{}, fmt.Errorf("client certificate %q names no agent, source or admin", cn)
}

// authenticator turns a caller's certificate or bearer token into an identity.
type authenticator struct {
	creds     *credentialFiles
	anonymous bool
}

// identify authenticates with a client certificate first, then a bearer token; without either it admits the
// caller only when anonymous access is allowed. A certificate reaches here only after the TLS handshake
// verified it against the client CAs (credentialFiles.verifyClient).
func (a *authenticator) identify(peerCerts []*x509.Certificate, authorization string) (Identity, error) {
	if len(peerCerts) > 0 && a.creds.caFile != "" {
		return certIdentity(peerCerts[0])
	}
	if authorization != "" {
		// RFC 7235: the scheme is case-insensitive.
		scheme, token, ok := strings.Cut(strings.TrimSpace(authorization), " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return Identity{}, fmt.Errorf("the authorization header is not a bearer token")
		}
		if id, ok := (*a.creds.tokens.Load())[strings.TrimSpace(token)]; ok {
			return id, nil
		}
		return Identity{}, fmt.Errorf("unknown bearer token")
	}
	if a.anonymous {
		return Identity{Kind: kindAnonymous}, nil
	}
	return Identity{}, fmt.Errorf("no client certificate or bearer token")
}

type identityKey struct{}

func withIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// identityFrom returns the caller's identity that the interceptors stored.
func identityFrom(ctx context.Context) Identity {
	id, _ := ctx.Value(identityKey{}).(Identity)
	return id
}

// grpcIdentity authenticates a gRPC call and admits only the role of the endpoint: agents on the agent
// endpoint, sources on the source endpoint.
func (a *authenticator) grpcIdentity(ctx context.Context, role string) (Identity, error) {
	var peerCerts []*x509.Certificate
	if p, ok := peer.FromContext(ctx); ok {
		if info, ok := p.AuthInfo.(grpccredentials.TLSInfo); ok {
			peerCerts = info.State.PeerCertificates
		}
	}
	var authorization string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			authorization = v[0]
		}
	}
	id, err := a.identify(peerCerts, authorization)
	if err != nil {
		return Identity{}, status.Error(codes.Unauthenticated, err.Error())
	}
	if id.Kind != kindAnonymous && id.Kind != role {
		return Identity{}, status.Errorf(codes.PermissionDenied, "%s may not use the %s endpoint", id, role)
	}
	return id, nil
}

// unaryInterceptor and streamInterceptor authenticate the calls of the endpoint of a role.
func (a *authenticator) unaryInterceptor(role string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		id, err := a.grpcIdentity(ctx, role)
		if err != nil {
			return nil, err
		}
		return handler(withIdentity(ctx, id), req)
	}
}

func (a *authenticator) streamInterceptor(role string) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		id, err := a.grpcIdentity(ss.Context(), role)
		if err != nil {
			return err
		}
		return handler(srv, &contextStream{ServerStream: ss, ctx: withIdentity(ss.Context(), id)})
	}
}

// contextStream is a server stream with a replaced context.
type contextStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *contextStream) Context() context.Context { return s.ctx }

// httpIdentity authenticates an HTTP request.
func (a *authenticator) httpIdentity(r *http.Request) (Identity, error) {
	var peerCerts []*x509.Certificate
	if r.TLS != nil {
		peerCerts = r.TLS.PeerCertificates
	}
	return a.identify(peerCerts, r.Header.Get("Authorization"))
}
