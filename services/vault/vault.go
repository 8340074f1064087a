// Package vault is the vault service: provider credentials encrypted at rest,
// listed to people as metadata only, and resolved for services under a
// deny-by-default policy with an environment fallback.
package vault

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"

	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
	"github.com/fabro-sh/fabro-go/services/vault/internal/audit"
	"github.com/fabro-sh/fabro-go/services/vault/internal/envelope"
	"github.com/fabro-sh/fabro-go/services/vault/internal/policy"
	"github.com/fabro-sh/fabro-go/services/vault/internal/store"
)

// Environment variables that carry a KEK directly, for deployments that keep
// it in a secret manager rather than a file.
const (
	EnvKEK         = "FABRO_VAULT_KEK"
	EnvPreviousKEK = "FABRO_VAULT_PREVIOUS_KEK"
)

// Config configures the vault.
type Config struct {
	// DataDir holds the store, the audit log and, by default, the KEK, all
	// under DataDir/vault. Callers are authenticated by the server runtime
	// (platform/auth); the vault reads the principal from the context.
	DataDir string
	// KEKFile holds the key-encryption key (32 bytes as base64 or hex).
	// When empty, FABRO_VAULT_KEK is used, else DataDir/vault/kek, created
	// on first start.
	KEKFile string
	// PreviousKEKFile holds the key the store was sealed with before a
	// rotation (or FABRO_VAULT_PREVIOUS_KEK): at start-up every data key is
	// re-wrapped from it to the current KEK.
	PreviousKEKFile string
	// PolicyFile overrides the default resolution policy (JSON).
	PolicyFile string
	// MaxVersions is how many versions of a secret are kept (default 10).
	MaxVersions int
	// MaxSecretBytes caps a secret value (default 64 KiB); a larger put is
	// refused with INVALID_ARGUMENT and stores nothing.
	MaxSecretBytes int
	// CounterFile keeps the store's rollback counter, the generation of the
	// newest store written (default DataDir/vault/generation). A store
	// older than it is refused at start. Put it out of reach of whoever
	// could put an old store back: beside the store it catches a restored
	// store file, on another volume a restored data directory too.
	CounterFile string
	// AcceptRollback starts with a store older than its counter anyway,
	// logged as an error and audited; the counter continues above.
	AcceptRollback bool
	// LookupEnv reads the environment: the KEK variables and the credential
	// fallback. Default os.LookupEnv.
	LookupEnv func(string) (string, bool)

	// Store is where the sealed records live: StoreFile (the default), one
	// file under DataDir, for a single vault; or StoreJetStream, a NATS
	// JetStream key-value bucket every replica shares, with the audit log
	// as a stream. The KEK stays outside either.
	Store string
	// NATSURL is the NATS server (comma-separated URLs of a cluster) of
	// StoreJetStream; NATSCredsFile its credentials (a JWT creds file),
	// if it asks for some.
	NATSURL, NATSCredsFile string
	// Replicas is how many NATS servers keep the bucket and the audit
	// stream (1 when zero; 3 on a three-node cluster).
	Replicas int
	// JetStream, when set, is used instead of connecting to NATSURL (an
	// embedding process's own connection; tests).
	JetStream jetstream.JetStream
}

// The values of Config.Store.
const (
	StoreFile      = "file"
	StoreJetStream = "jetstream"
)

// RegisterFlags adds the vault's flags to fs. The data directory flag is
// shared by every service, so the caller registers it.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.KEKFile, "vault-kek-file", c.KEKFile, "file holding the vault's key-encryption key (base64 or hex, 32 bytes); default $"+EnvKEK+", else <data-dir>/vault/kek")
	fs.StringVar(&c.PreviousKEKFile, "vault-previous-kek-file", c.PreviousKEKFile, "file holding the previous key-encryption key, to rotate from it at start-up (or $"+EnvPreviousKEK+")")
	fs.StringVar(&c.PolicyFile, "vault-policy-file", c.PolicyFile, "JSON file with the credential resolution policy; default: built-in policy for fabro's services")
	fs.IntVar(&c.MaxVersions, "vault-max-versions", c.MaxVersions, "versions kept per secret (0: 10)")
	fs.IntVar(&c.MaxSecretBytes, "vault-max-secret-bytes", c.MaxSecretBytes, "largest secret value accepted, in bytes (0: 65536)")
	fs.StringVar(&c.CounterFile, "vault-rollback-counter-file", c.CounterFile, "file keeping the vault store's rollback counter, best on another volume than the store; default <data-dir>/vault/generation")
	fs.StringVar(&c.Store, "vault-store", c.Store, "where the vault keeps its sealed secrets: file (one file under <data-dir>/vault; one vault replica) or jetstream (a JetStream key-value bucket on -vault-nats-url, shared by every replica; audit log as a stream)")
	fs.StringVar(&c.NATSURL, "vault-nats-url", c.NATSURL, "NATS server(s) with JetStream for -vault-store=jetstream, comma separated")
	fs.StringVar(&c.NATSCredsFile, "vault-nats-creds", c.NATSCredsFile, "NATS credentials file (JWT creds) for -vault-nats-url")
	fs.IntVar(&c.Replicas, "vault-nats-replicas", c.Replicas, "NATS servers keeping the vault's bucket and audit stream (0: 1; 3 on a three-node cluster)")
	fs.BoolVar(&c.AcceptRollback, "vault-accept-rollback", c.AcceptRollback, "start with a vault store older than its rollback counter (a restored backup): its deleted secrets and old values come back; logged")
}

// Service is the running vault. It implements the gRPC VaultService and the
// server runtime's Service interface.
type Service struct {
	vaultv1.UnimplementedVaultServiceServer

	logger    *slog.Logger
	maxPut    int // the largest PutSecret request, in bytes
	store     store.Backend
	audit     audit.Recorder
	nc        *nats.Conn // the connection New made, closed by Close; nil for none
	policy    policy.Policy
	lookupEnv func(string) (string, bool)
}

// New opens the vault's store, rotating its key when a previous KEK is
// configured. It fails, saying why, when the KEK does not match the store.
func New(ctx context.Context, cfg Config, logger *slog.Logger) (_ *Service, err error) {
	if cfg.LookupEnv == nil {
		cfg.LookupEnv = os.LookupEnv
	}
	if cfg.MaxSecretBytes < 0 {
		return nil, fmt.Errorf("vault: -vault-max-secret-bytes must not be negative, got %d", cfg.MaxSecretBytes)
	}
	pol := policy.Default()
	if cfg.PolicyFile != "" {
		if pol, err = policy.Load(cfg.PolicyFile); err != nil {
			return nil, fmt.Errorf("vault: %w", err)
		}
	}
	s := &Service{logger: logger, maxPut: cmp.Or(cfg.MaxSecretBytes, store.DefaultMaxValueBytes) + putOverhead, policy: pol, lookupEnv: cfg.LookupEnv}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	var (
		where    string
		rollback *store.RollbackError
		gen      func() uint64
		rotated  bool
	)
	switch cmp.Or(cfg.Store, StoreFile) {
	case StoreFile:
		st, err := openFile(ctx, cfg, logger)
		if err != nil {
			return nil, err
		}
		where, rollback, gen, rotated = st.path, st.v.Rollback(), st.v.Generation, st.rotated
		s.store = store.FileBackend{Store: st.v}
		if s.audit, err = audit.Open(filepath.Join(cfg.DataDir, "vault", "audit.log")); err != nil {
			return nil, fmt.Errorf("vault: %w", err)
		}
	case StoreJetStream:
		kv, err := s.openJetStream(ctx, cfg, logger)
		if err != nil {
			return nil, err
		}
		where, rollback, gen, rotated = "jetstream:"+store.SecretsBucket, kv.v.Rollback(), kv.v.Generation, kv.rotated
		s.store = kv.v
	default:
		return nil, fmt.Errorf("vault: -vault-store %q: use %s or %s", cfg.Store, StoreFile, StoreJetStream)
	}
	if rotated {
		s.record(ctx, audit.Entry{Op: "rotate", Caller: "admin", Outcome: "OK"})
	}
	if rb := rollback; rb != nil {
		logger.ErrorContext(ctx, "vault store rollback accepted (-vault-accept-rollback): secrets deleted since this copy are back, and values replaced since are old",
			"store", where, "store_generation", rb.Generation, "counter_file", rb.CounterFile, "counter_generation", rb.Counter,
			"counter_missing", rb.Missing, "store_generation_unknown", rb.Unknown, "now_generation", gen())
		s.record(ctx, audit.Entry{Op: "accept-rollback", Caller: "admin", Outcome: "OK"})
	}
	logger.InfoContext(ctx, "vault ready", "store", where, "kek_id", s.store.KEKID(), "generation", gen())
	return s, nil
}

// opened is a store as opened, and whether a previous KEK was rotated from.
type opened[T any] struct {
	v       T
	path    string
	rotated bool
}

// openFile opens the single-file store under DataDir/vault.
func openFile(ctx context.Context, cfg Config, logger *slog.Logger) (opened[*store.Store], error) {
	var none opened[*store.Store]
	if cfg.DataDir == "" {
		return none, errors.New("vault: a data directory is required")
	}
	dir := filepath.Join(cfg.DataDir, "vault")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return none, fmt.Errorf("vault: create %s: %w", dir, err)
	}
	storePath := filepath.Join(dir, "secrets.db")
	_, statErr := os.Stat(storePath)
	newStore := errors.Is(statErr, os.ErrNotExist)
	kek, previous, err := keks(cfg, filepath.Join(dir, "kek"), newStore, logger)
	if err != nil {
		return none, err
	}
	counter := cmp.Or(cfg.CounterFile, filepath.Join(dir, "generation"))
	st, err := store.Open(storePath, kek, previous, store.Options{MaxVersions: cfg.MaxVersions, MaxValueBytes: cfg.MaxSecretBytes,
		CounterFile: counter, AcceptRollback: cfg.AcceptRollback})
	if err != nil {
		return none, fmt.Errorf("vault: open store: %w", err)
	}
	damage, header := st.Damage()
	if header != "" {
		logger.ErrorContext(ctx, "vault store header damaged; every record was verified by decryption", "store", storePath, "problem", header)
	}
	for _, d := range damage {
		logger.ErrorContext(ctx, "vault secret damaged; delete it and put it again", "name", d.Name, "reason", d.Reason)
	}
	return opened[*store.Store]{v: st, path: storePath, rotated: previous != nil}, nil
}

// openJetStream opens the bucket and the audit stream on cfg.JetStream, or
// on a connection of its own to cfg.NATSURL. Every replica must be given
// the same KEK: none is generated, since one made here would be this
// replica's alone.
func (s *Service) openJetStream(ctx context.Context, cfg Config, logger *slog.Logger) (opened[*store.KV], error) {
	var none opened[*store.KV]
	kek, previous, err := keks(cfg, "", false, logger)
	if err != nil {
		return none, fmt.Errorf("%w (with -vault-store=jetstream every replica needs the same key: give it with -vault-kek-file or $%s)", err, EnvKEK)
	}
	js := cfg.JetStream
	if js == nil {
		if cfg.NATSURL == "" {
			return none, errors.New("vault: -vault-store=jetstream needs -vault-nats-url")
		}
		opts := []nats.Option{nats.Name("fabro-vault"), nats.MaxReconnects(-1)}
		if cfg.NATSCredsFile != "" {
			opts = append(opts, nats.UserCredentials(cfg.NATSCredsFile))
		}
		if s.nc, err = nats.Connect(cfg.NATSURL, opts...); err != nil {
			return none, fmt.Errorf("vault: connect to NATS %s: %w", cfg.NATSURL, err)
		}
		if js, err = jetstream.New(s.nc); err != nil {
			return none, fmt.Errorf("vault: JetStream: %w", err)
		}
	}
	counter := cfg.CounterFile
	if counter == "" && cfg.DataDir != "" {
		counter = filepath.Join(cfg.DataDir, "vault", "generation")
	}
	kv, err := store.OpenKV(ctx, js, cfg.Replicas, kek, previous, store.Options{MaxVersions: cfg.MaxVersions, MaxValueBytes: cfg.MaxSecretBytes,
		CounterFile: counter, AcceptRollback: cfg.AcceptRollback})
	if err != nil {
		return none, fmt.Errorf("vault: open store: %w", err)
	}
	if s.audit, err = audit.OpenStream(ctx, js, cfg.Replicas); err != nil {
		return none, fmt.Errorf("vault: %w", err)
	}
	return opened[*store.KV]{v: kv, rotated: previous != nil}, nil
}

// keks loads the KEK (from fallback, created when create, when neither a
// file nor the environment gives one) and the previous KEK, if any.
func keks(cfg Config, fallback string, create bool, logger *slog.Logger) (kek, previous *envelope.KEK, err error) {
	if kek, err = loadKEK(cfg.KEKFile, EnvKEK, cfg.LookupEnv, fallback, create, logger); err != nil {
		return nil, nil, err
	}
	if cfg.PreviousKEKFile != "" || hasEnv(cfg.LookupEnv, EnvPreviousKEK) {
		if previous, err = loadKEK(cfg.PreviousKEKFile, EnvPreviousKEK, cfg.LookupEnv, "", false, logger); err != nil {
			return nil, nil, err
		}
	}
	return kek, previous, nil
}

// putOverhead is what a PutSecretRequest holds besides the value: a name
// of at most 128 characters, the expected version, the field tags.
const putOverhead = 1 << 10

// smallRequest bounds the vault's other requests: names, a page token.
const smallRequest = 64 << 10

// RequestLimits implements the server runtime's RequestLimiter: a request
// of the vault over its bound is refused before it is decoded, not after
// the server's 64 MiB limit has let it be copied (a 63 MiB PutSecret once
// took the server from 84 MB to 850 MB).
func (s *Service) RequestLimits() map[string]int {
	limits := map[string]int{}
	for _, m := range vaultv1.VaultService_ServiceDesc.Methods {
		limits["/"+vaultv1.VaultService_ServiceDesc.ServiceName+"/"+m.MethodName] = smallRequest
	}
	limits[vaultv1.VaultService_PutSecret_FullMethodName] = s.maxPut
	return limits
}

// Close releases the audit log and the NATS connection New made.
func (s *Service) Close() error {
	var err error
	if s.audit != nil {
		err = s.audit.Close()
	}
	if s.nc != nil {
		s.nc.Close()
	}
	return err
}

// Name implements the server runtime's Service.
func (s *Service) Name() string { return vaultv1.VaultService_ServiceDesc.ServiceName }

// RegisterGRPC implements the server runtime's Service.
func (s *Service) RegisterGRPC(r grpc.ServiceRegistrar) { vaultv1.RegisterVaultServiceServer(r, s) }

// RegisterGateway implements the server runtime's Service.
func (s *Service) RegisterGateway(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error {
	return vaultv1.RegisterVaultServiceHandler(ctx, mux, conn)
}

func hasEnv(lookup func(string) (string, bool), name string) bool {
	v, ok := lookup(name)
	return ok && v != ""
}

// loadKEK reads a KEK from file, else from the environment variable env, else
// from fallback, which is created with a fresh key when create is true.
func loadKEK(file, env string, lookup func(string) (string, bool), fallback string, create bool, logger *slog.Logger) (*envelope.KEK, error) {
	source := file
	var text string
	switch {
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("vault: read key-encryption key: %w", err)
		}
		text = string(b)
	case hasEnv(lookup, env):
		text, _ = lookup(env)
		source = "$" + env
	case fallback != "":
		source = fallback
		b, err := os.ReadFile(fallback)
		switch {
		case err == nil:
			text = string(b)
		case errors.Is(err, os.ErrNotExist) && create:
			text = envelope.GenerateKEKText()
			if err := os.WriteFile(fallback, []byte(text+"\n"), 0o600); err != nil {
				return nil, fmt.Errorf("vault: write key-encryption key: %w", err)
			}
			logger.Warn("vault generated a key-encryption key beside its data; in production give one with -vault-kek-file or $"+EnvKEK, "path", fallback)
		case errors.Is(err, os.ErrNotExist):
			return nil, fmt.Errorf("vault: the store exists but its key-encryption key does not: give it with -vault-kek-file or $%s (looked for %s)", env, fallback)
		default:
			return nil, fmt.Errorf("vault: read key-encryption key: %w", err)
		}
	default:
		return nil, fmt.Errorf("vault: no key-encryption key given")
	}
	kek, err := envelope.ParseKEK(text)
	if err != nil {
		return nil, fmt.Errorf("vault: key-encryption key from %s: %w", source, err)
	}
	return kek, nil
}

// envFallback reports whether name is one of the conventional variables the
// environment may supply when the store has no value.
func envFallback(name string) bool {
	for _, pat := range []string{"*_API_KEY", "AWS_*", "DAYTONA_*"} {
		if ok, _ := path.Match(pat, name); ok {
			return true
		}
	}
	return false
}
