// Package version tells which build of argocd-pull is running. The release build (`make image`) sets Version and
// Revision with the linker's -X flag; a plain `go build` falls back to what Go recorded about the build.
package version

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/spf13/pflag"
)

// Set by the linker: -X github.com/argocd-pull/argocd-pull/internal/version.Version=v0.1.0 (and .Revision).
var (
	// Version is the release version, or what `git describe` said at build time.
	Version = ""
	// Revision is the git commit the binary was built from.
	Revision = ""
)

// Info is what a build knows about itself.
type Info struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Get returns the build's information: the linker's values, else the module version and VCS revision that Go
// recorded, else "(devel)" and "unknown".
func Get() Info {
	info := Info{Version: Version, Revision: Revision, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if info.Version == "" && bi.Main.Version != "" {
			info.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && info.Revision == "" {
				info.Revision = s.Value
			}
		}
	}
	if info.Version == "" {
		info.Version = "(devel)"
	}
	if info.Revision == "" {
		info.Revision = "unknown"
	}
	return info
}

// String is the one-line form `argocd-pull version` prints.
func (i Info) String() string {
	return fmt.Sprintf("argocd-pull %s (revision %s, %s, %s)", i.Version, i.Revision, i.GoVersion, i.Platform)
}

// Options are the flags of `argocd-pull version`.
type Options struct {
	// Output is "" (one line) or "json".
	Output string
	// Out receives the output; os.Stdout when nil.
	Out io.Writer
}

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVarP(&o.Output, "output", "o", o.Output, "Output format: empty for one line, or json")
}

// Validate checks the flags.
func (o *Options) Validate() error {
	if o.Output != "" && o.Output != "json" {
		return fmt.Errorf("--output must be empty or json, not %q", o.Output)
	}
	return nil
}

// Run prints the build's information.
func (o *Options) Run(context.Context) error {
	out := o.Out
	if out == nil {
		out = os.Stdout
	}
	if o.Output == "json" {
		return json.NewEncoder(out).Encode(Get())
	}
	_, err := fmt.Fprintln(out, Get())
	return err
}
