package vault

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/platform/paging"
	"github.com/fabro-sh/fabro-go/services/vault/internal/audit"
	"github.com/fabro-sh/fabro-go/services/vault/internal/store"
)

// domain is the google.rpc.ErrorInfo domain of every vault error.
const domain grpcerr.Domain = "vault.fabro.dev"

// PutSecret implements VaultService.
func (s *Service) PutSecret(ctx context.Context, req *vaultv1.PutSecretRequest) (*vaultv1.PutSecretResponse, error) {
	caller := s.caller(ctx)
	if err := checkVersion("expected_version", req.ExpectedVersion, 0); err != nil {
		return nil, s.fail(ctx, audit.Entry{Op: "put", Caller: caller, Names: []string{req.GetName()}}, err)
	}
	md, err := s.store.Put(ctx, req.GetName(), []byte(req.GetValue()), req.ExpectedVersion, caller)
	e := audit.Entry{Op: "put", Caller: caller, Names: []string{req.GetName()}, Version: md.Current}
	if err != nil {
		return nil, s.fail(ctx, e, err)
	}
	s.record(ctx, e)
	return &vaultv1.PutSecretResponse{Secret: toProto(md)}, nil
}

// GetSecret implements VaultService.
func (s *Service) GetSecret(ctx context.Context, req *vaultv1.GetSecretRequest) (*vaultv1.GetSecretResponse, error) {
	e := audit.Entry{Op: "get", Caller: s.caller(ctx), Names: []string{req.GetName()}}
	if err := checkName("name", req.GetName()); err != nil {
		return nil, s.fail(ctx, e, err)
	}
	md, err := s.store.Get(ctx, req.GetName())
	if err != nil {
		return nil, s.fail(ctx, e, err)
	}
	s.record(ctx, e)
	return &vaultv1.GetSecretResponse{Secret: toProto(md)}, nil
}

// ListSecrets implements VaultService: one page of the secrets and corrupt
// records, merged by name, continuing after the page token's name.
func (s *Service) ListSecrets(ctx context.Context, req *vaultv1.ListSecretsRequest) (*vaultv1.ListSecretsResponse, error) {
	secrets, corrupt, err := s.store.List(ctx, req.GetPrefix())
	if err != nil {
		return nil, s.fail(ctx, audit.Entry{Op: "list", Caller: s.caller(ctx)}, err)
	}
	type item struct {
		name string
		md   *store.Metadata // nil for a corrupt record
	}
	items := make([]item, 0, len(secrets)+len(corrupt))
	for i := range secrets {
		items = append(items, item{name: secrets[i].Name, md: &secrets[i]})
	}
	for _, n := range corrupt {
		items = append(items, item{name: n})
	}
	slices.SortFunc(items, func(a, b item) int { return strings.Compare(a.name, b.name) })
	key := func(it item) []string { return []string{it.name} }
	page, next, err := paging.Page(items, req, paging.Filter(req.GetPrefix()), key, paging.Ascending(key))
	if err != nil {
		return nil, domain.InvalidField(paging.Field(err), err.Error())
	}
	resp := &vaultv1.ListSecretsResponse{NextPageToken: next}
	for _, it := range page {
		if it.md == nil {
			resp.CorruptNames = append(resp.CorruptNames, it.name)
			continue
		}
		resp.Secrets = append(resp.Secrets, toProto(*it.md))
	}
	s.record(ctx, audit.Entry{Op: "list", Caller: s.caller(ctx), Outcome: codes.OK.String()})
	return resp, nil
}

// DeleteSecret implements VaultService.
func (s *Service) DeleteSecret(ctx context.Context, req *vaultv1.DeleteSecretRequest) (*vaultv1.DeleteSecretResponse, error) {
	e := audit.Entry{Op: "delete", Caller: s.caller(ctx), Names: []string{req.GetName()}, Version: req.GetVersion()}
	if err := cmp.Or(checkName("name", req.GetName()), checkVersion("version", req.Version, 1), checkVersion("expected_version", req.ExpectedVersion, 1)); err != nil {
		return nil, s.fail(ctx, e, err)
	}
	n, err := s.store.Delete(ctx, req.GetName(), req.Version, req.ExpectedVersion)
	if err != nil {
		return nil, s.fail(ctx, e, err)
	}
	s.record(ctx, e)
	return &vaultv1.DeleteSecretResponse{DeletedVersions: int32(n)}, nil
}

// ResolveCredentials implements VaultService.
func (s *Service) ResolveCredentials(ctx context.Context, req *vaultv1.ResolveCredentialsRequest) (*vaultv1.ResolveCredentialsResponse, error) {
	// The authorization table admits service principals only; checked here
	// again, since values leave the vault through this call alone.
	p, _ := auth.FromContext(ctx)
	service := ""
	if p.Role == auth.RoleService {
		service = p.Name
	}
	e := audit.Entry{Op: "resolve", Caller: cmp.Or(service, "anonymous"), Names: req.GetNames()}
	if len(req.GetNames()) == 0 {
		return nil, s.fail(ctx, e, domain.InvalidField("names", "name at least one credential to resolve"))
	}
	for i, name := range req.GetNames() {
		if err := checkName("names["+strconv.Itoa(i)+"]", name); err != nil {
			return nil, s.fail(ctx, e, err)
		}
	}
	// Policy first, for every name, before the store is consulted: a denied
	// caller learns nothing about which secrets exist.
	for _, name := range req.GetNames() {
		if service == "" || !s.policy.Allows(service, name) {
			e.Outcome = codes.PermissionDenied.String()
			s.record(ctx, e)
			return nil, domain.New(codes.PermissionDenied, "DENIED", "caller may not resolve the requested credentials")
		}
	}
	resp := &vaultv1.ResolveCredentialsResponse{}
	for _, name := range req.GetNames() {
		value, ver, err := s.store.Value(ctx, name)
		switch {
		case err == nil:
			resp.Credentials = append(resp.Credentials, &vaultv1.Credential{
				Name: name, Value: string(value), Source: vaultv1.CredentialSource_CREDENTIAL_SOURCE_VAULT, Version: ver,
			})
			e.Sources = append(e.Sources, "vault")
		case errors.Is(err, store.ErrNotFound):
			if v, ok := s.lookupEnv(name); ok && v != "" && envFallback(name) {
				resp.Credentials = append(resp.Credentials, &vaultv1.Credential{
					Name: name, Value: v, Source: vaultv1.CredentialSource_CREDENTIAL_SOURCE_ENVIRONMENT,
				})
				e.Sources = append(e.Sources, "environment")
				continue
			}
			resp.Missing = append(resp.Missing, name)
			e.Sources = append(e.Sources, "missing")
		default:
			return nil, s.fail(ctx, e, err)
		}
	}
	s.record(ctx, e)
	return resp, nil
}

// caller names who is calling, for the audit log and created_by: the
// principal's name ("admin" for the first admin token), or "anonymous"
// when the server runs without authentication.
func (s *Service) caller(ctx context.Context) string {
	p, ok := auth.FromContext(ctx)
	if !ok {
		return "anonymous"
	}
	return p.Name
}

// record appends e to the audit log. An audit failure is logged loudly but
// does not fail the request that has already taken effect.
func (s *Service) record(ctx context.Context, e audit.Entry) {
	if e.Outcome == "" {
		e.Outcome = codes.OK.String()
	}
	observe(ctx, e)
	if err := s.audit.Record(e); err != nil {
		s.logger.ErrorContext(ctx, "vault audit write failed", "op", e.Op, "err", err)
	}
}

// checkName refuses a name no secret can have (Put's store check says the
// same): an empty one is a missing field, not a missing secret.
func checkName(field, name string) error {
	switch {
	case name == "":
		return domain.InvalidField(field, "a secret name is required")
	case !store.ValidName(name):
		return domain.InvalidField(field, fmt.Sprintf("%q is not a secret name: use upper-case letters, digits and underscores, starting with a letter", name))
	}
	return nil
}

// checkVersion refuses a version below least when one is given.
func checkVersion(field string, v *int64, least int64) error {
	if v != nil && *v < least {
		return domain.InvalidField(field, fmt.Sprintf("%s must be at least %d, not %d", field, least, *v))
	}
	return nil
}

// fail audits a failed operation and turns err into a gRPC status.
func (s *Service) fail(ctx context.Context, e audit.Entry, err error) error {
	err = s.toStatus(ctx, err)
	e.Outcome = status.Code(err).String()
	s.record(ctx, e)
	return err
}

// toStatus maps store errors to gRPC statuses with details. Store errors
// carry names and versions, never values, so their text is safe to return.
func (s *Service) toStatus(ctx context.Context, err error) error {
	if _, ok := err.(interface{ GRPCStatus() *status.Status }); ok {
		return err
	}
	var (
		conflict *store.ConflictError
		corrupt  *store.CorruptError
	)
	switch {
	case errors.Is(err, store.ErrInvalidName):
		return domain.InvalidField("name", err.Error()+": use upper-case letters, digits and underscores, starting with a letter")
	case errors.Is(err, store.ErrEmptyValue), errors.Is(err, store.ErrTooLarge):
		return domain.InvalidField("value", err.Error())
	case errors.Is(err, store.ErrNotFound):
		return domain.New(codes.NotFound, "SECRET_NOT_FOUND", err.Error())
	case errors.As(err, &conflict):
		return domain.New(codes.Aborted, "VERSION_CONFLICT", err.Error(), grpcerr.Meta(
			"name", conflict.Name, "expected_version", strconv.FormatInt(conflict.Expected, 10),
			"current_version", strconv.FormatInt(conflict.Current, 10)))
	case errors.As(err, &corrupt):
		return domain.New(codes.DataLoss, "RECORD_CORRUPT", err.Error(), grpcerr.Meta("name", corrupt.Name))
	case errors.Is(err, store.ErrUnavailable):
		s.logger.WarnContext(ctx, "vault store unavailable", "err", err)
		return domain.New(codes.Unavailable, "STORE_UNAVAILABLE", "the vault's store (NATS JetStream) cannot be reached; retry", grpcerr.RetryAfter(time.Second))
	default:
		if e := domain.FromContext(err); e != nil {
			return e
		}
		s.logger.ErrorContext(ctx, "vault internal error", "err", err)
		return domain.Internal("internal error")
	}
}

func toProto(md store.Metadata) *vaultv1.SecretMetadata {
	out := &vaultv1.SecretMetadata{
		Name: md.Name, CurrentVersion: md.Current,
		CreateTime: timestamppb.New(md.Created), UpdateTime: timestamppb.New(md.Updated),
	}
	for _, v := range md.Versions {
		out.Versions = append(out.Versions, &vaultv1.SecretVersion{
			Version: v.Version, CreateTime: timestamppb.New(v.Created), CreatedBy: v.CreatedBy, SizeBytes: v.Size,
		})
	}
	return out
}
