// Package envflag lets an environment variable stand for a command-line flag: with the prefix
// ARGOCD_PULL_SERVER_, the variable ARGOCD_PULL_SERVER_DATABASE_URL sets --database-url. A flag given on the
// command line still wins. It knows nothing of the commands that use it.
package envflag

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// Apply sets every flag of fs that has an environment variable to its value, as its default.
func Apply(fs *pflag.FlagSet, prefix string) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		name := prefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		v, ok := os.LookupEnv(name)
		if !ok {
			return
		}
		if err := f.Value.Set(v); err != nil {
			errs = append(errs, fmt.Errorf("environment variable %s: %w", name, err))
			return
		}
		f.DefValue = f.Value.String()
	})
	return errors.Join(errs...)
}
