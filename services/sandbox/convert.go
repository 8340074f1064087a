package sandbox

import (
	"google.golang.org/protobuf/types/known/timestamppb"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

func capsToProto(c driver.Capabilities) *sandboxv1.Capabilities {
	pc := &sandboxv1.Capabilities{
		Isolation: sandboxv1.Isolation(c.Isolation), LiveStreaming: c.LiveStreaming,
		StreamsSeparated: c.StreamsSeparated, Stdin: c.Stdin, Cancel: c.Cancel,
	}
	if l := c.Limits; l != (driver.LimitSupport{}) {
		pc.Limits = &sandboxv1.LimitSupport{Memory: l.Memory, Processes: l.Processes, Cpu: l.CPU, NetworkNone: l.NetworkNone}
	}
	return pc
}

func (e *entry) toProto() *sandboxv1.Sandbox {
	info := e.sb.Info()
	state, msg := e.sandboxState()
	return &sandboxv1.Sandbox{
		SandboxId: e.id, Driver: e.driver, State: state, StateMessage: msg,
		Capabilities: capsToProto(info.Capabilities), Platform: info.Platform, OsVersion: info.OSVersion,
		WorkingDirectory: info.WorkingDirectory, RootDirectory: info.RootDirectory,
		Labels: e.spec.Labels, DriverOptions: e.spec.Options, ManagedWorkspace: info.ManagedWorkspace,
		CreateTime: timestamppb.New(e.created),
	}
}

func infoToProto(fi driver.FileInfo) *sandboxv1.FileInfo {
	return &sandboxv1.FileInfo{
		Path: fi.Path, Type: sandboxv1.FileType(fi.Type), SizeBytes: fi.Size, Mode: fi.Mode,
		ModifyTime: timestamppb.New(fi.ModTime),
	}
}

func statsToProto(c driver.CaptureStats) *sandboxv1.CaptureStats {
	return &sandboxv1.CaptureStats{ObservedBytes: c.Observed, RetainedBytes: c.Retained, OmittedBytes: c.Omitted, HeadBytes: c.Head}
}

func resultToProto(id string, r driver.ExecResult) *sandboxv1.ExecResult {
	out := &sandboxv1.ExecResult{
		ExecId: id, Termination: sandboxv1.Termination(r.Termination), Signal: r.Signal,
		DurationMs: r.Duration.Milliseconds(), Stdout: r.Stdout, Stderr: r.Stderr,
		StdoutStats: statsToProto(r.StdoutStats), StderrStats: statsToProto(r.StderrStats),
		StreamsSeparated: r.StreamsSeparated,
	}
	if r.ExitCode != nil {
		c := int32(*r.ExitCode)
		out.ExitCode = &c
	}
	return out
}
