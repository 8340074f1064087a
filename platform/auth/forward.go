package auth

import (
	"errors"
	"strings"
)

// A call one agent replica forwards to another (the one serving the
// session), and a call the agent makes to the sandbox service for a
// session, carry the agent's service credential and name the person it
// acts for in these headers. Only the agent's service principal may name
// one, and it must be a person's: the call is then authorized, and served,
// as that person's (a sandbox the agent creates for alice is alice's).
const (
	ForwardedPrincipalHeader = "fabro-forwarded-principal" // "role:name"
	ForwardedTokenIDHeader   = "fabro-forwarded-token-id"
)

var errForward = errors.New("auth: refused forwarded principal")

// forwardable are the services on which the agent's token acts for a
// person, and nowhere else (not on the vault or the token service, which
// would make it any admin). On the sandbox service the agent alone already
// reaches every sandbox; acting for a person narrows it to theirs. On the
// gateway it binds the round-trip state a session's turns get to the
// session's owner, as a person's own calls are bound.
var forwardable = []string{"/fabro.agent.v1.AgentService/", "/fabro.sandbox.v1.SandboxService/", "/fabro.llm.v1.LLMGatewayService/"}

func isForwardable(method string) bool {
	for _, prefix := range forwardable {
		if strings.HasPrefix(method, prefix) {
			return true
		}
	}
	return false
}

// forwarded is the principal a forwarded call to method acts for.
func forwarded(caller Principal, method string, principal, tokenID []string) (Principal, error) {
	if !caller.IsService(ServiceAgent) || !isForwardable(method) || len(principal) != 1 || len(tokenID) > 1 {
		return caller, errForward
	}
	p, ok := ParsePrincipal(principal[0])
	if !ok {
		return caller, errForward
	}
	if len(tokenID) == 1 {
		p.TokenID = tokenID[0]
	}
	return p, nil
}

// ParsePrincipal reads a person's principal as String writes it
// ("admin:alice", "user:bob"); services are not accepted.
func ParsePrincipal(v string) (Principal, bool) {
	role, name, ok := strings.Cut(v, ":")
	r := Role(role)
	if !ok || (r != RoleAdmin && r != RoleUser) || !ValidName(name) {
		return Principal{}, false
	}
	return Principal{Name: name, Role: r}, true
}
