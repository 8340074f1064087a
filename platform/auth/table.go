package auth

import "strings"

// Grant is a set of principals that may call a method.
type Grant uint8

// The principals a grant can name. Open needs no credential at all.
const (
	Open Grant = 1 << iota
	Admin
	User
	LLMGateway
	Agent
	Sandbox

	// People are both human roles.
	People = Admin | User
	// Anyone authenticated: people and services.
	Authenticated = People | LLMGateway | Agent | Sandbox
)

// bit is the grant bit of p.
func (p Principal) bit() Grant {
	switch p.Role {
	case RoleAdmin:
		return Admin
	case RoleUser:
		return User
	case RoleService:
		switch p.Name {
		case ServiceLLMGateway:
			return LLMGateway
		case ServiceAgent:
			return Agent
		case ServiceSandbox:
			return Sandbox
		}
	}
	return 0
}

// Allows reports whether g lets p call.
func (g Grant) Allows(p Principal) bool { return g&Open != 0 || g&p.bit() != 0 }

// Reflection methods; they need a credential unless the operator opens them.
const (
	reflectionV1      = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
	reflectionV1Alpha = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
)

// Table maps every full gRPC method name of every service fabro serves to
// who may call it. A method missing here is denied to everyone; a test walks
// every registered service descriptor and fails on a method without an entry.
//
// Each service principal gets exactly the calls that service makes: the
// agent streams and completes through the gateway and drives sandboxes; the
// gateway, the agent and the sandbox service resolve credentials (the vault's
// policy then limits which names each may resolve).
var Table = map[string]Grant{
	"/grpc.health.v1.Health/Check": Open,
	"/grpc.health.v1.Health/Watch": Open,
	"/grpc.health.v1.Health/List":  Open,
	reflectionV1:                   Authenticated,
	reflectionV1Alpha:              Authenticated,

	"/fabro.auth.v1.TokenService/CreateToken": Admin,
	"/fabro.auth.v1.TokenService/ListTokens":  Admin,
	"/fabro.auth.v1.TokenService/GetToken":    Admin,
	"/fabro.auth.v1.TokenService/RevokeToken": Admin,

	"/fabro.vault.v1.VaultService/PutSecret":          Admin,
	"/fabro.vault.v1.VaultService/GetSecret":          Admin,
	"/fabro.vault.v1.VaultService/ListSecrets":        Admin,
	"/fabro.vault.v1.VaultService/DeleteSecret":       Admin,
	"/fabro.vault.v1.VaultService/ResolveCredentials": LLMGateway | Agent | Sandbox,

	"/fabro.llm.v1.LLMGatewayService/Stream":         People | Agent,
	"/fabro.llm.v1.LLMGatewayService/Complete":       People | Agent,
	"/fabro.llm.v1.LLMGatewayService/CompleteObject": People,
	"/fabro.llm.v1.LLMGatewayService/ListModels":     People,
	"/fabro.llm.v1.LLMGatewayService/GetModel":       People,
	"/fabro.llm.v1.LLMGatewayService/GetProvider":    People,
	"/fabro.llm.v1.LLMGatewayService/ListProviders":  People,
	"/fabro.llm.v1.LLMGatewayService/ResolveModel":   People | Agent,
	"/fabro.llm.v1.LLMGatewayService/Probe":          People,

	"/fabro.sandbox.v1.SandboxService/ListDrivers":   People | Agent,
	"/fabro.sandbox.v1.SandboxService/GetDriver":     People | Agent,
	"/fabro.sandbox.v1.SandboxService/CreateSandbox": People | Agent,
	"/fabro.sandbox.v1.SandboxService/GetSandbox":    People | Agent,
	"/fabro.sandbox.v1.SandboxService/ListSandboxes": People | Agent,
	"/fabro.sandbox.v1.SandboxService/DeleteSandbox": People | Agent,
	"/fabro.sandbox.v1.SandboxService/ReadFile":      People | Agent,
	"/fabro.sandbox.v1.SandboxService/ReadFileBytes": People | Agent,
	"/fabro.sandbox.v1.SandboxService/WriteFile":     People | Agent,
	"/fabro.sandbox.v1.SandboxService/DeleteFile":    People | Agent,
	"/fabro.sandbox.v1.SandboxService/StatFile":      People | Agent,
	"/fabro.sandbox.v1.SandboxService/ListDirectory": People | Agent,
	"/fabro.sandbox.v1.SandboxService/RenameFile":    People | Agent,
	"/fabro.sandbox.v1.SandboxService/MakeDirectory": People | Agent,
	"/fabro.sandbox.v1.SandboxService/Exec":          People | Agent,
	"/fabro.sandbox.v1.SandboxService/ExecStream":    People | Agent,
	"/fabro.sandbox.v1.SandboxService/CancelExec":    People | Agent,
	"/fabro.sandbox.v1.SandboxService/Grep":          People | Agent,
	"/fabro.sandbox.v1.SandboxService/Glob":          People | Agent,
	"/fabro.sandbox.v1.SandboxService/Walk":          People | Agent,
	"/fabro.sandbox.v1.SandboxService/StartProcess":  People | Agent,
	"/fabro.sandbox.v1.SandboxService/AttachProcess": People | Agent,
	"/fabro.sandbox.v1.SandboxService/SignalProcess": People | Agent,
	"/fabro.sandbox.v1.SandboxService/WaitProcess":   People | Agent,
	"/fabro.sandbox.v1.SandboxService/ListProcesses": People | Agent,
	"/fabro.sandbox.v1.SandboxService/PauseSandbox":  People | Agent,
	"/fabro.sandbox.v1.SandboxService/ResumeSandbox": People | Agent,

	"/fabro.agent.v1.AgentService/CreateSession":     People,
	"/fabro.agent.v1.AgentService/Prompt":            People,
	"/fabro.agent.v1.AgentService/StartPrompt":       People,
	"/fabro.agent.v1.AgentService/Steer":             People,
	"/fabro.agent.v1.AgentService/FollowUp":          People,
	"/fabro.agent.v1.AgentService/Interrupt":         People,
	"/fabro.agent.v1.AgentService/Abort":             People,
	"/fabro.agent.v1.AgentService/GetHistory":        People,
	"/fabro.agent.v1.AgentService/GetSnapshot":       People,
	"/fabro.agent.v1.AgentService/GetSession":        People,
	"/fabro.agent.v1.AgentService/ListSessions":      People,
	"/fabro.agent.v1.AgentService/CloseSession":      People,
	"/fabro.agent.v1.AgentService/DeleteSession":     People,
	"/fabro.agent.v1.AgentService/ResumeSession":     People,
	"/fabro.agent.v1.AgentService/StreamEvents":      People,
	"/fabro.agent.v1.AgentService/Approve":           People,
	"/fabro.agent.v1.AgentService/SubmitToolResult":  People,
	"/fabro.agent.v1.AgentService/ListCheckpoints":   People,
	"/fabro.agent.v1.AgentService/DiffCheckpoint":    People,
	"/fabro.agent.v1.AgentService/RestoreCheckpoint": People,
	// Each principal's own sessions (the handler checks); the response is
	// a NATS password, so no REST route.
	"/fabro.agent.v1.AgentService/IssueEventsCredential": People,
}

// isReflection reports whether method belongs to server reflection.
func isReflection(method string) bool {
	return strings.HasPrefix(method, "/grpc.reflection.")
}
