package plugin

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pluginv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/plugin/v1"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// The driver's enums share the protocol's numbering, so conversions are
// casts; these functions keep the nested messages in one place.

func capsToProto(c driver.Capabilities) *pluginv1.Capabilities {
	return &pluginv1.Capabilities{
		Isolation: pluginv1.Isolation(c.Isolation), LiveStreaming: c.LiveStreaming, StreamsSeparated: c.StreamsSeparated,
		Stdin: c.Stdin, Cancel: c.Cancel, Commands: c.Commands, Processes: c.Processes, Terminals: c.Terminals, Pause: c.Pause,
		Limits: &pluginv1.LimitSupport{Memory: c.Limits.Memory, Processes: c.Limits.Processes, Cpu: c.Limits.CPU, NetworkNone: c.Limits.NetworkNone, Disk: c.Limits.Disk},
	}
}

func capsFromProto(c *pluginv1.Capabilities) driver.Capabilities {
	l := c.GetLimits()
	return driver.Capabilities{
		Isolation: driver.Isolation(c.GetIsolation()), LiveStreaming: c.GetLiveStreaming(), StreamsSeparated: c.GetStreamsSeparated(),
		Stdin: c.GetStdin(), Cancel: c.GetCancel(), Commands: c.GetCommands(), Processes: c.GetProcesses(), Terminals: c.GetTerminals(), Pause: c.GetPause(),
		Limits: driver.LimitSupport{Memory: l.GetMemory(), Processes: l.GetProcesses(), CPU: l.GetCpu(), NetworkNone: l.GetNetworkNone(), Disk: l.GetDisk()},
	}
}

func specToProto(s driver.Spec) *pluginv1.Spec {
	return &pluginv1.Spec{
		Id: s.ID, WorkingDirectory: s.WorkingDirectory, Env: s.Env, Labels: s.Labels, Options: s.Options,
		Limits: &pluginv1.Limits{
			MemoryBytes: s.Limits.MemoryBytes, Processes: int64(s.Limits.Processes), Cpu: s.Limits.CPU, DiskBytes: s.Limits.DiskBytes,
			Network: pluginv1.Network(s.Limits.Network), BestEffort: s.Limits.BestEffort,
		},
	}
}

func specFromProto(s *pluginv1.Spec) driver.Spec {
	l := s.GetLimits()
	return driver.Spec{
		ID: s.GetId(), WorkingDirectory: s.GetWorkingDirectory(), Env: s.GetEnv(), Labels: s.GetLabels(), Options: s.GetOptions(),
		Limits: driver.Limits{
			MemoryBytes: l.GetMemoryBytes(), Processes: int(l.GetProcesses()), CPU: l.GetCpu(), DiskBytes: l.GetDiskBytes(),
			Network: driver.Network(l.GetNetwork()), BestEffort: l.GetBestEffort(),
		},
	}
}

func infoToProto(i driver.Info) *pluginv1.Info {
	return &pluginv1.Info{
		Capabilities: capsToProto(i.Capabilities), Platform: i.Platform, OsVersion: i.OSVersion,
		WorkingDirectory: i.WorkingDirectory, RootDirectory: i.RootDirectory, ManagedWorkspace: i.ManagedWorkspace,
	}
}

func infoFromProto(i *pluginv1.Info) driver.Info {
	return driver.Info{
		Capabilities: capsFromProto(i.GetCapabilities()), Platform: i.GetPlatform(), OSVersion: i.GetOsVersion(),
		WorkingDirectory: i.GetWorkingDirectory(), RootDirectory: i.GetRootDirectory(), ManagedWorkspace: i.GetManagedWorkspace(),
	}
}

func fileInfoToProto(fi driver.FileInfo) *pluginv1.FileInfo {
	var mt int64
	if !fi.ModTime.IsZero() {
		mt = fi.ModTime.UnixNano()
	}
	return &pluginv1.FileInfo{Path: fi.Path, Type: pluginv1.FileType(fi.Type), Size: fi.Size, Mode: fi.Mode, ModTimeUnixNano: mt}
}

func fileInfoFromProto(fi *pluginv1.FileInfo) driver.FileInfo {
	var mt time.Time
	if n := fi.GetModTimeUnixNano(); n != 0 {
		mt = time.Unix(0, n)
	}
	return driver.FileInfo{Path: fi.GetPath(), Type: driver.FileType(fi.GetType()), Size: fi.GetSize(), Mode: fi.GetMode(), ModTime: mt}
}

func statsToProto(c driver.CaptureStats) *pluginv1.CaptureStats {
	return &pluginv1.CaptureStats{Observed: c.Observed, Retained: c.Retained, Omitted: c.Omitted, Head: c.Head}
}

func statsFromProto(c *pluginv1.CaptureStats) driver.CaptureStats {
	return driver.CaptureStats{Observed: c.GetObserved(), Retained: c.GetRetained(), Omitted: c.GetOmitted(), Head: c.GetHead()}
}

func resultToProto(r driver.ExecResult) *pluginv1.ExecResult {
	out := &pluginv1.ExecResult{
		Termination: pluginv1.Termination(r.Termination), Signal: r.Signal, Duration: durationpb.New(r.Duration),
		Stdout: r.Stdout, Stderr: r.Stderr, StdoutStats: statsToProto(r.StdoutStats), StderrStats: statsToProto(r.StderrStats),
		StreamsSeparated: r.StreamsSeparated, LimitHit: pluginv1.LimitHit(r.LimitHit),
	}
	if r.ExitCode != nil {
		c := int32(*r.ExitCode)
		out.ExitCode = &c
	}
	return out
}

func resultFromProto(r *pluginv1.ExecResult) driver.ExecResult {
	out := driver.ExecResult{
		Termination: driver.Termination(r.GetTermination()), Signal: r.GetSignal(), Duration: r.GetDuration().AsDuration(),
		Stdout: r.GetStdout(), Stderr: r.GetStderr(), StdoutStats: statsFromProto(r.GetStdoutStats()), StderrStats: statsFromProto(r.GetStderrStats()),
		StreamsSeparated: r.GetStreamsSeparated(), LimitHit: driver.LimitHit(r.GetLimitHit()),
	}
	if r.ExitCode != nil {
		c := int(r.GetExitCode())
		out.ExitCode = &c
	}
	return out
}
