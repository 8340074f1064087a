package auth

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	authv1 "github.com/fabro-sh/fabro-go/gen/fabro/auth/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/platform/paging"
)

// TokenService serves fabro.auth.v1.TokenService over a Store. The
// authorization table limits it to admins.
type TokenService struct {
	authv1.UnimplementedTokenServiceServer
	store *Store
}

// NewTokenService returns the token service of store.
func NewTokenService(store *Store) *TokenService { return &TokenService{store: store} }

// Name implements the server runtime's Service.
func (t *TokenService) Name() string { return authv1.TokenService_ServiceDesc.ServiceName }

// RegisterGRPC implements the server runtime's Service.
func (t *TokenService) RegisterGRPC(r grpc.ServiceRegistrar) { authv1.RegisterTokenServiceServer(r, t) }

// RegisterGateway implements the server runtime's Service.
func (t *TokenService) RegisterGateway(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error {
	return authv1.RegisterTokenServiceHandler(ctx, mux, conn)
}

var roleOf = map[authv1.Role]Role{authv1.Role_ROLE_USER: RoleUser, authv1.Role_ROLE_ADMIN: RoleAdmin}

func toProtoRole(r Role) authv1.Role {
	switch r {
	case RoleUser:
		return authv1.Role_ROLE_USER
	case RoleAdmin:
		return authv1.Role_ROLE_ADMIN
	case RoleService:
		return authv1.Role_ROLE_SERVICE
	}
	return authv1.Role_ROLE_UNSPECIFIED
}

func toProto(e Entry) *authv1.Token {
	return &authv1.Token{TokenId: e.ID, Name: e.Name, Role: toProtoRole(e.Role), CreateTime: timestamppb.New(e.Created), Policy: PolicyToProto(e.Policy)}
}

var periodOf = map[authv1.BudgetPeriod]Period{authv1.BudgetPeriod_BUDGET_PERIOD_DAY: PeriodDay,
	authv1.BudgetPeriod_BUDGET_PERIOD_WEEK: PeriodWeek, authv1.BudgetPeriod_BUDGET_PERIOD_MONTH: PeriodMonth}

// PolicyToProto is p's TokenPolicy; nil for nil.
func PolicyToProto(p *Policy) *authv1.TokenPolicy {
	if p == nil {
		return nil
	}
	tp := &authv1.TokenPolicy{RequestsPerMinute: p.RequestsPerMinute, TokensPerMinute: p.TokensPerMinute,
		MaxConcurrentCalls: p.MaxConcurrent, Models: slices.Clone(p.Models)}
	if b := p.Budget; b != nil {
		tp.Budget = &authv1.Budget{AmountUsdMicros: b.USDMicros, Soft: b.Soft, WarnPercent: b.WarnPercent}
		for k, v := range periodOf {
			if v == b.Period {
				tp.Budget.Period = k
			}
		}
	}
	return tp
}

// PolicyFromProto reads a TokenPolicy, naming the field at fault; nil for
// nil.
func PolicyFromProto(tp *authv1.TokenPolicy) (*Policy, string, error) {
	if tp == nil {
		return nil, "", nil
	}
	p := &Policy{RequestsPerMinute: tp.GetRequestsPerMinute(), TokensPerMinute: tp.GetTokensPerMinute(),
		MaxConcurrent: tp.GetMaxConcurrentCalls(), Models: slices.Clone(tp.GetModels())}
	if b := tp.GetBudget(); b != nil {
		p.Budget = &Budget{USDMicros: b.GetAmountUsdMicros(), Period: periodOf[b.GetPeriod()], Soft: b.GetSoft(), WarnPercent: b.GetWarnPercent()}
	}
	if field, err := p.Validate(); err != nil {
		return nil, "policy." + field, err
	}
	return p, "", nil
}

// CreateToken implements TokenService.
func (t *TokenService) CreateToken(_ context.Context, req *authv1.CreateTokenRequest) (*authv1.CreateTokenResponse, error) {
	role, ok := roleOf[req.GetRole()]
	if !ok {
		return nil, domain.InvalidField("role", "role must be ROLE_USER or ROLE_ADMIN")
	}
	if !ValidName(req.GetName()) {
		return nil, domain.InvalidField("name", "name must be 1 to 64 letters, digits, '.', '-', '_' or '@', starting with a letter or digit")
	}
	policy, field, err := PolicyFromProto(req.GetPolicy())
	if err != nil {
		return nil, domain.InvalidField(field, err.Error())
	}
	value, e, err := t.store.IssueWithPolicy(req.GetName(), role, policy)
	if err != nil {
		return nil, err // not a status: the server reports it as internal
	}
	return &authv1.CreateTokenResponse{Token: toProto(e), Value: value}, nil
}

// ListTokens implements TokenService: oldest first, ties by id, one page
// after the page token's (creation time, id).
func (t *TokenService) ListTokens(_ context.Context, req *authv1.ListTokensRequest) (*authv1.ListTokensResponse, error) {
	entries, err := t.store.List()
	if err != nil {
		return nil, err
	}
	entries = slices.Clone(entries)
	key := func(e Entry) []string { return []string{fmt.Sprintf("%020d", e.Created.UnixNano()), e.ID} }
	// The order key gives, compared without formatting it per comparison.
	slices.SortStableFunc(entries, func(a, b Entry) int {
		return cmp.Or(cmp.Compare(a.Created.UnixNano(), b.Created.UnixNano()), strings.Compare(a.ID, b.ID))
	})
	page, next, err := paging.Page(entries, req, paging.Filter(), key, paging.Ascending(key))
	if err != nil {
		return nil, domain.InvalidField(paging.Field(err), err.Error())
	}
	resp := &authv1.ListTokensResponse{NextPageToken: next}
	for _, e := range page {
		resp.Tokens = append(resp.Tokens, toProto(e))
	}
	return resp, nil
}

// GetToken implements TokenService.
func (t *TokenService) GetToken(_ context.Context, req *authv1.GetTokenRequest) (*authv1.GetTokenResponse, error) {
	if req.GetTokenId() == "" {
		return nil, domain.InvalidField("token_id", "name the token's id (see ListTokens)")
	}
	entries, err := t.store.List()
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.ID == req.GetTokenId() {
			return &authv1.GetTokenResponse{Token: toProto(e)}, nil
		}
	}
	return nil, domain.New(codes.NotFound, "TOKEN_NOT_FOUND", "no token has this id", grpcerr.Meta("token_id", req.GetTokenId()))
}

// RevokeToken implements TokenService.
func (t *TokenService) RevokeToken(_ context.Context, req *authv1.RevokeTokenRequest) (*authv1.RevokeTokenResponse, error) {
	if req.GetTokenId() == "" {
		return nil, domain.InvalidField("token_id", "name the token's id (see ListTokens)")
	}
	switch err := t.store.Revoke(req.GetTokenId()); {
	case errors.Is(err, ErrNotFound):
		return nil, domain.New(codes.NotFound, "TOKEN_NOT_FOUND", "no token has this id", grpcerr.Meta("token_id", req.GetTokenId()))
	case err != nil:
		return nil, err
	}
	return &authv1.RevokeTokenResponse{}, nil
}
