package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/argocd-pull/argocd-pull/internal/console"
	"github.com/argocd-pull/argocd-pull/internal/envflag"
)

// EnvPrefix prefixes the environment variable of every server flag: --database-url is
// ARGOCD_PULL_SERVER_DATABASE_URL. A flag on the command line wins over its variable.
const EnvPrefix = "ARGOCD_PULL_SERVER_"

// Options configures `argocd-pull server`.
type Options struct {
	DatabaseURL      string
	DatabaseMaxConns int32

	SourceAddress string
	AgentAddress  string
	HTTPAddress   string
	// PprofAddress serves Go's /debug/pprof endpoints in plain HTTP; empty to disable.
	PprofAddress string

	TLSCertFile    string
	TLSKeyFile     string
	ClientCAFile   string
	TokenFile      string
	AllowAnonymous bool
	// CredentialsReloadInterval is how often the token, certificate and CA files are checked for changes.
	CredentialsReloadInterval time.Duration

	AutoRegisterConsumers bool
	InstanceID            string

	MaxEventBytes  int
	MaxResyncBytes int
	MaxPageSize    int

	UndeliveredAfter          time.Duration
	StuckDeleteAfter          time.Duration
	SweepInterval             time.Duration
	InstanceHeartbeatInterval time.Duration
	InstanceTimeout           time.Duration
	StreamHeartbeatInterval   time.Duration
	SourceQueueLength         int
	SourceSendTimeout         time.Duration
	AgentQueueLength          int
	AgentSendTimeout          time.Duration
	// AgentResyncGrace is how long an agent subscription may go without a spec resync from its cluster before
	// the server closes the agent's connection (0: never).
	AgentResyncGrace time.Duration
	ShutdownTimeout  time.Duration
	// StoreBatchWait is how long a batch of spec or status writes waits after its first write for more before
	// it is committed (0: no wait; the writes queued while a commit runs still go together).
	StoreBatchWait time.Duration

	// Console opens the hub console's doors for argocd-server (package console).
	Console console.Options

	envErr error
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	host, _ := os.Hostname()
	return &Options{
		DatabaseMaxConns:          16,
		SourceAddress:             ":8090",
		AgentAddress:              ":8091",
		HTTPAddress:               ":8000",
		InstanceID:                host + "-" + uuid.NewString()[:8],
		MaxEventBytes:             4 << 20,
		MaxResyncBytes:            64 << 20,
		MaxPageSize:               1000,
		UndeliveredAfter:          2 * time.Minute,
		StuckDeleteAfter:          10 * time.Minute,
		SweepInterval:             30 * time.Second,
		InstanceHeartbeatInterval: 10 * time.Second,
		InstanceTimeout:           45 * time.Second,
		StreamHeartbeatInterval:   10 * time.Second,
		SourceQueueLength:         10000,
		SourceSendTimeout:         30 * time.Second,
		AgentQueueLength:          100,
		AgentSendTimeout:          30 * time.Second,
		AgentResyncGrace:          time.Minute,
		ShutdownTimeout:           20 * time.Second,
		StoreBatchWait:            20 * time.Millisecond,
		CredentialsReloadInterval: 10 * time.Second,
		Console:                   console.NewOptions(),
	}
}

// AddFlags registers the flags, then applies their ARGOCD_PULL_SERVER_* environment variables as new
// defaults.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.DatabaseURL, "database-url", o.DatabaseURL, "PostgreSQL connection string (postgres://user:pass@host:5432/db?sslmode=...)")
	fs.Int32Var(&o.DatabaseMaxConns, "database-max-conns", o.DatabaseMaxConns, "Size of the database connection pool")
	fs.StringVar(&o.SourceAddress, "source-grpc-bind-address", o.SourceAddress, "Address of the gRPC endpoint for sources (hub controllers)")
	fs.StringVar(&o.AgentAddress, "agent-grpc-bind-address", o.AgentAddress, "Address of the gRPC endpoint for agents (managed clusters)")
	fs.StringVar(&o.HTTPAddress, "http-bind-address", o.HTTPAddress, "Address of the REST API, /metrics, /healthz and /readyz")
	fs.StringVar(&o.PprofAddress, "pprof-bind-address", o.PprofAddress, "Address of Go's /debug/pprof endpoints, in plain HTTP without authentication (empty to disable; bind it to loopback)")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", o.TLSCertFile, "Serving certificate of all three listeners; without it they serve plain text")
	fs.StringVar(&o.TLSKeyFile, "tls-key-file", o.TLSKeyFile, "Key of the serving certificate")
	fs.StringVar(&o.ClientCAFile, "client-ca-file", o.ClientCAFile, "CA bundle that verifies client certificates (mTLS); the certificate's common name is the identity")
	fs.StringVar(&o.TokenFile, "token-file", o.TokenFile, "File of bearer tokens, one token,kind[,name] per line (kind: agent, source or admin)")
	fs.DurationVar(&o.CredentialsReloadInterval, "credentials-reload-interval", o.CredentialsReloadInterval,
		"How often the token file, serving certificate and client CA file are read again; a change takes effect without a restart")
	fs.BoolVar(&o.AllowAnonymous, "insecure-allow-anonymous", o.AllowAnonymous, "Admit callers without certificate or token, with every role (development only)")
	fs.BoolVar(&o.AutoRegisterConsumers, "auto-register-consumers", o.AutoRegisterConsumers, "Register an unknown consumer on its agent's first subscription or a source's first spec for it")
	fs.StringVar(&o.InstanceID, "instance-id", o.InstanceID, "Name of this instance among those sharing the database")
	fs.IntVar(&o.MaxEventBytes, "max-event-bytes", o.MaxEventBytes, "Largest spec or status event accepted")
	fs.IntVar(&o.MaxResyncBytes, "max-resync-bytes", o.MaxResyncBytes, "Largest resync request accepted (it lists every work a client holds)")
	fs.IntVar(&o.MaxPageSize, "max-page-size", o.MaxPageSize, "Largest page the REST API returns; larger sizes are reduced to it")
	fs.DurationVar(&o.UndeliveredAfter, "undelivered-after", o.UndeliveredAfter, "A spec without a status for its version this long is published again")
	fs.DurationVar(&o.StuckDeleteAfter, "stuck-delete-after", o.StuckDeleteAfter, "A deletion unconfirmed this long is reported as stuck (metric and log)")
	fs.DurationVar(&o.SweepInterval, "sweep-interval", o.SweepInterval, "How often the undelivered and stuck-delete sweeps run")
	fs.DurationVar(&o.InstanceHeartbeatInterval, "instance-heartbeat-interval", o.InstanceHeartbeatInterval, "How often this instance marks itself live")
	fs.DurationVar(&o.InstanceTimeout, "instance-timeout", o.InstanceTimeout, "An instance without heartbeat this long is considered gone")
	fs.DurationVar(&o.StreamHeartbeatInterval, "stream-heartbeat-interval", o.StreamHeartbeatInterval, "Interval of heartbeats on subscription streams")
	fs.IntVar(&o.SourceQueueLength, "source-queue-length", o.SourceQueueLength, "Statuses queued per source subscription")
	fs.DurationVar(&o.SourceSendTimeout, "source-send-timeout", o.SourceSendTimeout, "A source subscription whose queue stays full this long is closed (the source resyncs)")
	fs.IntVar(&o.AgentQueueLength, "agent-queue-length", o.AgentQueueLength, "Specs queued per agent subscription")
	fs.DurationVar(&o.AgentSendTimeout, "agent-send-timeout", o.AgentSendTimeout, "An agent subscription whose queue stays full this long is closed (the agent resyncs)")
	fs.DurationVar(&o.AgentResyncGrace, "agent-resync-grace", o.AgentResyncGrace,
		"An agent that subscribes and sends no spec resync this long after has its connection closed, so that its client connects, subscribes and resyncs again (0: never)")
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", o.ShutdownTimeout, "Time given to in-flight requests on shutdown")
	fs.DurationVar(&o.StoreBatchWait, "store-batch-wait", o.StoreBatchWait,
		"How long a batch of spec or status writes waits after its first write for more, before its one transaction (0: no wait)")
	o.Console.AddFlags(fs)
	o.envErr = envflag.Apply(fs, EnvPrefix)
}

// Validate checks the options.
func (o *Options) Validate() error {
	errs := []error{o.envErr, o.Console.Validate()}
	if o.DatabaseURL == "" {
		errs = append(errs, errors.New("--database-url is required"))
	}
	if (o.TLSCertFile == "") != (o.TLSKeyFile == "") {
		errs = append(errs, errors.New("--tls-cert-file and --tls-key-file go together"))
	}
	if o.ClientCAFile != "" && o.TLSCertFile == "" {
		errs = append(errs, errors.New("--client-ca-file needs --tls-cert-file"))
	}
	if o.TokenFile != "" && o.TLSCertFile == "" {
		errs = append(errs, errors.New("--token-file needs --tls-cert-file: bearer tokens are only sent over TLS"))
	}
	if o.TokenFile == "" && o.ClientCAFile == "" && !o.AllowAnonymous {
		errs = append(errs, errors.New("configure --token-file or --client-ca-file, or accept anonymous callers with --insecure-allow-anonymous"))
	}
	if o.InstanceID == "" {
		errs = append(errs, errors.New("--instance-id must not be empty"))
	}
	errs = append(errs, positive("--max-event-bytes", o.MaxEventBytes), positive("--max-resync-bytes", o.MaxResyncBytes),
		positive("--max-page-size", o.MaxPageSize), positive("--source-queue-length", o.SourceQueueLength),
		positive("--agent-queue-length", o.AgentQueueLength), positive("--database-max-conns", int(o.DatabaseMaxConns)))
	if o.StoreBatchWait < 0 || o.StoreBatchWait > time.Second {
		errs = append(errs, errors.New("--store-batch-wait must be between 0 and 1s"))
	}
	if o.AgentResyncGrace < 0 {
		errs = append(errs, errors.New("--agent-resync-grace must not be negative"))
	}
	if o.StreamHeartbeatInterval < time.Second {
		errs = append(errs, errors.New("--stream-heartbeat-interval must be at least 1s"))
	}
	if o.InstanceTimeout <= o.InstanceHeartbeatInterval {
		errs = append(errs, errors.New("--instance-timeout must exceed --instance-heartbeat-interval"))
	}
	for name, d := range map[string]time.Duration{"--sweep-interval": o.SweepInterval, "--undelivered-after": o.UndeliveredAfter,
		"--stuck-delete-after": o.StuckDeleteAfter, "--instance-heartbeat-interval": o.InstanceHeartbeatInterval,
		"--source-send-timeout": o.SourceSendTimeout, "--agent-send-timeout": o.AgentSendTimeout, "--shutdown-timeout": o.ShutdownTimeout,
		"--credentials-reload-interval": o.CredentialsReloadInterval} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive", name))
		}
	}
	return errors.Join(errs...)
}

func positive(name string, v int) error {
	if v <= 0 {
		return fmt.Errorf("%s must be positive", name)
	}
	return nil
}

// Run serves until ctx ends, then shuts down gracefully.
func (o *Options) Run(ctx context.Context) error {
	s := New(o)
	if err := s.Start(ctx); err != nil {
		return err
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-s.Errors():
	}
	klog.FromContext(ctx).Info("Shutting down", "instance", o.InstanceID)
	s.Stop()
	return err
}
