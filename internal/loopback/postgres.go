package loopback

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// postgresBinDirs are where Debian installs the PostgreSQL server binaries.
var postgresBinDirs = []string{"/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/17/bin"}

// Postgres is a private PostgreSQL server on a loopback port, in its own directory.
type Postgres struct {
	Dir  string
	Port int
	// User is the database superuser (trust authentication on loopback).
	User string

	bin  string
	cred *syscall.Credential
	proc *Process
	// settings are extra server settings (name=value), kept across restarts.
	settings []string
}

// StartPostgres initialises a database cluster in dir and starts it, with extra server settings
// ("name=value", as `postgres -c` takes them) after the loopback defaults. As root it runs as the `postgres`
// system user, because PostgreSQL refuses to run as root.
func StartPostgres(ctx context.Context, dir string, settings ...string) (*Postgres, error) {
	initdb, err := SystemBinary("initdb", postgresBinDirs...)
	if err != nil {
		return nil, err
	}
	postgres, err := SystemBinary("postgres", postgresBinDirs...)
	if err != nil {
		return nil, err
	}
	p := &Postgres{Dir: dir, User: "postgres", bin: postgres, settings: settings}
	if os.Geteuid() == 0 {
		if p.cred, err = postgresCredential(); err != nil {
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o750); err != nil {
		return nil, fmt.Errorf("create postgres dir: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { //nolint:gosec // the server user must reach its socket dir
		return nil, fmt.Errorf("chmod postgres dir: %w", err)
	}
	if p.cred != nil {
		if err := os.Chown(dir, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
			return nil, fmt.Errorf("chown postgres dir: %w", err)
		}
		if err := makeTraversable(filepath.Dir(dir)); err != nil {
			return nil, err
		}
	}
	cmd := exec.CommandContext(ctx, initdb, "-D", data, "-U", p.User, "--auth=trust", "-E", "UTF8", "--no-sync", "--locale=C") //nolint:gosec // system binary
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w: %s", err, out)
	}
	if err := p.Start(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// Start starts the server (again, after Stop or Kill) on the same port when it has one. After a Kill, the
// backends of the killed server may hold its shared memory for a moment: Start tries again until they are gone.
func (p *Postgres) Start(ctx context.Context) error {
	var lastErr error
	waited := 0
	for attempt := 0; attempt < 3; {
		if p.Port == 0 || lastErr != nil {
			port, err := FreePort()
			if err != nil {
				return err
			}
			p.Port = port
		}
		args := []string{
			"-D", filepath.Join(p.Dir, "data"),
			"-p", strconv.Itoa(p.Port),
			"-k", p.Dir,
			"-c", "listen_addresses=127.0.0.1",
			"-c", "fsync=off",
			"-c", "synchronous_commit=off",
			"-c", "full_page_writes=off",
			"-c", "max_connections=200",
			"-c", "shared_buffers=256MB",
		}
		for _, setting := range p.settings {
			args = append(args, "-c", setting)
		}
		proc, err := StartProcess(ProcessSpec{
			Name:       "postgres",
			Path:       p.bin,
			Args:       args,
			LogPath:    filepath.Join(p.Dir, "logs", "postgres.log"),
			Credential: p.cred,
		})
		if err != nil {
			return err
		}
		p.proc = proc
		lastErr = proc.WaitReady(ctx, func(ctx context.Context) error {
			conn, err := pgx.Connect(ctx, p.URL("postgres"))
			if err != nil {
				return err
			}
			return conn.Close(ctx)
		})
		if lastErr == nil {
			return nil
		}
		proc.Kill()
		log := tail(proc.LogPath, 10)
		if strings.Contains(log, "pre-existing shared memory block") && waited < 50 && ctx.Err() == nil {
			// The killed server's backends have not exited yet; same port, a moment later.
			waited++
			lastErr = nil
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if !strings.Contains(log, "already in use") {
			return lastErr
		}
		attempt++
	}
	return lastErr
}

// URL returns a connection string for a database on this server.
func (p *Postgres) URL(database string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", p.User, p.Port, database)
}

// CreateDatabase creates a database and returns its connection string.
func (p *Postgres) CreateDatabase(ctx context.Context, name string) (string, error) {
	conn, err := pgx.Connect(ctx, p.URL("postgres"))
	if err != nil {
		return "", fmt.Errorf("connect to postgres: %w", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return p.URL(name), nil
}

// Stop shuts the server down cleanly.
func (p *Postgres) Stop() {
	if p.proc != nil {
		p.proc.Stop(20 * time.Second)
	}
}

// Shutdown stops the server with PostgreSQL's fast shutdown (as pg_ctl stop and restart do by default): it
// ends every session, checkpoints and exits. Start brings it back.
func (p *Postgres) Shutdown() {
	if p.proc != nil {
		p.proc.Signal(syscall.SIGINT, 30*time.Second)
	}
}

// Kill kills the server as a crash would; Start brings it back with its data.
func (p *Postgres) Kill() {
	if p.proc != nil {
		p.proc.Kill()
	}
}

func postgresCredential() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs the postgres system user (from Debian's postgresql package): %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("parse uid of postgres: %w", err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("parse gid of postgres: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// makeTraversable lets other users pass through dir and its ancestors (execute bit only, no listing), so that
// the postgres user reaches its data directory below a root-owned temporary directory.
func makeTraversable(dir string) error {
	for {
		info, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("stat %s: %w", dir, err)
		}
		if info.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(dir, info.Mode().Perm()|0o001); err != nil { //nolint:gosec // execute bit only
				return fmt.Errorf("make %s traversable for the postgres user: %w", dir, err)
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil
		}
		dir = parent
	}
}

// Pid is the process ID of the PostgreSQL server's main process.
func (p *Postgres) Pid() int { return p.proc.Pid() }
