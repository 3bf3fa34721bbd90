package envflag_test

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/argocd-pull/argocd-pull/internal/envflag"
)

func TestApply(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		args    []string
		wantURL string
		wantTO  time.Duration
		wantErr bool
	}{
		{name: "defaults without variables", wantURL: "postgres://default", wantTO: time.Second},
		{name: "a variable sets the default", env: map[string]string{"TEST_DATABASE_URL": "postgres://env", "TEST_TIMEOUT": "5s"},
			wantURL: "postgres://env", wantTO: 5 * time.Second},
		{name: "the command line wins", env: map[string]string{"TEST_DATABASE_URL": "postgres://env"},
			args: []string{"--database-url", "postgres://flag"}, wantURL: "postgres://flag", wantTO: time.Second},
		{name: "another prefix is ignored", env: map[string]string{"OTHER_DATABASE_URL": "postgres://other"},
			wantURL: "postgres://default", wantTO: time.Second},
		{name: "a bad value is an error that names the variable", env: map[string]string{"TEST_TIMEOUT": "soon"},
			wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			url := fs.String("database-url", "postgres://default", "")
			timeout := fs.Duration("timeout", time.Second, "")
			err := envflag.Apply(fs, "TEST_")
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), "TEST_TIMEOUT") {
					t.Fatalf("Apply: %v, want an error that names TEST_TIMEOUT", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if *url != tc.wantURL || *timeout != tc.wantTO {
				t.Errorf("--database-url %q --timeout %v, want %q %v", *url, *timeout, tc.wantURL, tc.wantTO)
			}
		})
	}
}
