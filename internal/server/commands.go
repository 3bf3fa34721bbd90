package server

import (
	"context"
	"errors"

	"github.com/spf13/pflag"

	"github.com/argocd-pull/argocd-pull/internal/envflag"
	"github.com/argocd-pull/argocd-pull/internal/server/store"
)

// MigrateOptions configures `argocd-pull server migrate`.
type MigrateOptions struct {
	DatabaseURL string
	envErr      error
}

// AddFlags registers the flags.
func (o *MigrateOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.DatabaseURL, "database-url", o.DatabaseURL, "PostgreSQL connection string")
	o.envErr = envflag.Apply(fs, EnvPrefix)
}

// Validate checks the options.
func (o *MigrateOptions) Validate() error {
	if o.DatabaseURL == "" {
		return errors.Join(o.envErr, errors.New("--database-url is required"))
	}
	return o.envErr
}

// Run applies the migrations.
func (o *MigrateOptions) Run(ctx context.Context) error {
	st, err := store.New(ctx, store.Config{URL: o.DatabaseURL, MaxConns: 2})
	if err != nil {
		return err
	}
	defer st.Close()
	return st.Migrate(ctx)
}
