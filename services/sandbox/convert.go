package sandbox

import (
	"fmt"
	"math"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

func capsToProto(c driver.Capabilities) *sandboxv1.Capabilities {
	pc := &sandboxv1.Capabilities{
		Isolation: sandboxv1.Isolation(c.Isolation), LiveStreaming: c.LiveStreaming,
		StreamsSeparated: c.StreamsSeparated, Stdin: c.Stdin, Cancel: c.Cancel, Processes: c.Processes, Terminals: c.Terminals, Pause: c.Pause,
		Limits: &sandboxv1.LimitSupport{Memory: c.Limits.Memory, Processes: c.Limits.Processes, Cpu: c.Limits.CPU, NetworkNone: c.Limits.NetworkNone, Disk: c.Limits.Disk},
	}
	if l := c.Limits; l != (driver.LimitSupport{}) {
		pc.Limits = &sandboxv1.LimitSupport{Memory: l.Memory, Processes: l.Processes, Cpu: l.CPU, NetworkNone: l.NetworkNone, Disk: l.Disk}
	}
	return pc
}

// toProto describes the sandbox: READY, PAUSED, or FAILED with the reason.
func (e *entry) toProto() *sandboxv1.Sandbox {
	e.mu.Lock()
	sb, failed, paused := e.sb, e.failed, e.paused
	e.mu.Unlock()
	info, state := e.info, sandboxv1.SandboxState_SANDBOX_STATE_READY
	if sb != nil {
		info = sb.Info()
		if reason, gone := checkGone(sb); gone {
			state, failed = sandboxv1.SandboxState_SANDBOX_STATE_FAILED, reason
		} else if paused {
			state = sandboxv1.SandboxState_SANDBOX_STATE_PAUSED
		}
	} else {
		state = sandboxv1.SandboxState_SANDBOX_STATE_FAILED
	}
	return &sandboxv1.Sandbox{
		SandboxId: e.id, Driver: e.driver, State: state, StateMessage: failed,
		Capabilities: capsToProto(info.Capabilities), Platform: info.Platform, OsVersion: info.OSVersion,
		WorkingDirectory: info.WorkingDirectory, RootDirectory: info.RootDirectory,
		Labels: e.spec.Labels, DriverOptions: e.spec.Options, ManagedWorkspace: info.ManagedWorkspace,
		CreateTime: timestamppb.New(e.created), Owner: e.owner,
	}
}

// limitsFromProto checks and converts a spec's limits.
func limitsFromProto(l *sandboxv1.ResourceLimits) (driver.Limits, error) {
	switch {
	case l.GetMemoryBytes() < 0:
		return driver.Limits{}, domain.InvalidField("spec.limits.memory_bytes", "memory_bytes must not be negative")
	case l.GetDiskBytes() < 0:
		return driver.Limits{}, domain.InvalidField("spec.limits.disk_bytes", "disk_bytes must not be negative")
	case l.GetMaxProcesses() < 0:
		return driver.Limits{}, domain.InvalidField("spec.limits.max_processes", "max_processes must not be negative")
	case l.GetCpus() < 0 || math.IsNaN(l.GetCpus()) || math.IsInf(l.GetCpus(), 0) || l.GetCpus() > 1024:
		return driver.Limits{}, domain.InvalidField("spec.limits.cpus", "cpus must be between 0 and 1024")
	}
	out := driver.Limits{MemoryBytes: l.GetMemoryBytes(), Processes: int(l.GetMaxProcesses()), CPU: l.GetCpus(), DiskBytes: l.GetDiskBytes(), BestEffort: l.GetBestEffort()}
	switch l.GetNetwork() {
	case sandboxv1.NetworkPolicy_NETWORK_POLICY_UNSPECIFIED:
	case sandboxv1.NetworkPolicy_NETWORK_POLICY_NONE:
		out.Network = driver.NetworkNone
	case sandboxv1.NetworkPolicy_NETWORK_POLICY_ALLOW:
		out.Network = driver.NetworkAllow
	default:
		return driver.Limits{}, domain.InvalidField("spec.limits.network", fmt.Sprintf("unknown network policy %d", l.GetNetwork()))
	}
	return out, nil
}

// checkLimits refuses limits the driver does not enforce, naming them,
// unless the spec allows best effort.
func checkLimits(name string, sup driver.LimitSupport, l driver.Limits) error {
	var missing []string
	if l.MemoryBytes > 0 && !sup.Memory {
		missing = append(missing, "memory_bytes")
	}
	if l.Processes > 0 && !sup.Processes {
		missing = append(missing, "max_processes")
	}
	if l.CPU > 0 && !sup.CPU {
		missing = append(missing, "cpus")
	}
	if l.DiskBytes > 0 && !sup.Disk {
		missing = append(missing, "disk_bytes")
	}
	if l.Network == driver.NetworkNone && !sup.NetworkNone {
		missing = append(missing, "network none")
	}
	if len(missing) == 0 || l.BestEffort {
		return nil
	}
	list := strings.Join(missing, ", ")
	return domain.New(codes.FailedPrecondition, "LIMIT_UNSUPPORTED", fmt.Sprintf("the %s driver cannot enforce the limit %s here; set limits.best_effort to run without it", name, list), grpcerr.Meta("driver", name, "limits", list))
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
		Duration: durationpb.New(r.Duration), Stdout: r.Stdout, Stderr: r.Stderr,
		StdoutStats: statsToProto(r.StdoutStats), StderrStats: statsToProto(r.StderrStats),
		StreamsSeparated: r.StreamsSeparated,
	}
	switch r.LimitHit {
	case driver.LimitMemory:
		out.LimitExceeded = sandboxv1.LimitExceeded_LIMIT_EXCEEDED_MEMORY
	case driver.LimitProcesses:
		out.LimitExceeded = sandboxv1.LimitExceeded_LIMIT_EXCEEDED_PROCESSES
	case driver.LimitDisk:
		out.LimitExceeded = sandboxv1.LimitExceeded_LIMIT_EXCEEDED_DISK
	}
	if r.ExitCode != nil {
		c := int32(*r.ExitCode)
		out.ExitCode = &c
	}
	return out
}

// diskLimit applies the service's disk default and maximum. The default
// is set only where the driver enforces a disk limit and the workspace is
// managed (a directory of the caller's cannot be bounded), so it never
// makes a create fail.
func (s *Service) diskLimit(d driver.Driver, spec *sandboxv1.SandboxSpec, l driver.Limits) (driver.Limits, error) {
	if max := s.security.DiskMax; max > 0 && l.DiskBytes > max {
		return l, domain.InvalidField("spec.limits.disk_bytes", fmt.Sprintf("disk_bytes %d is over this service's maximum of %d", l.DiskBytes, max))
	}
	if l.DiskBytes > 0 || s.security.DiskDefault <= 0 || !d.Capabilities().Limits.Disk {
		return l, nil
	}
	managed := true
	switch d.Capabilities().Isolation {
	case driver.IsolationContainer:
		_, hostDir := spec.GetDriverOptions()["host_dir"]
		managed = !hostDir
	case driver.IsolationVM:
	default:
		managed = spec.GetWorkingDirectory() == ""
	}
	if managed {
		l.DiskBytes = s.security.DiskDefault
		if max := s.security.DiskMax; max > 0 {
			l.DiskBytes = min(l.DiskBytes, max)
		}
	}
	return l, nil
}
