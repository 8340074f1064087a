package plugin

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// A plugin runs in a session of its own, so that whatever it started on
// the host (bwrap, its helpers) can be found once it is gone: its children
// are reparented to the nearest subreaper, which the sandbox service is
// (the local driver makes it one) and which must then reap them, or to
// init. sweep kills every process left in the session and reaps those that
// came to this process, waiting on each by pid: os/exec's own children,
// the plugin among them, are never waited for here.

// detach starts the plugin in a new session.
func detach(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid = true
}

// sweepTimeout bounds how long a sweep waits for the session to empty.
const sweepTimeout = 5 * time.Second

// sweep kills and reaps what is left of session sid, the plugin (pid sid)
// aside, until none is left or sweepTimeout passes.
func sweep(sid int) {
	self := os.Getpid()
	deadline := time.Now().Add(sweepTimeout)
	for {
		left := sessionMembers(sid)
		if len(left) == 0 || time.Now().After(deadline) {
			return
		}
		for _, m := range left {
			if m.state != 'Z' {
				syscall.Kill(m.pid, syscall.SIGKILL)
			}
			if m.ppid == self {
				var ws syscall.WaitStatus
				syscall.Wait4(m.pid, &ws, syscall.WNOHANG, nil)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type member struct {
	pid, ppid int
	state     byte
}

// sessionMembers lists the processes of session sid but its leader.
func sessionMembers(sid int) []member {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []member
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == sid {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// "pid (comm) state ppid pgrp session ...": comm may hold anything.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(b[i+1:])
		if len(f) < 4 {
			continue
		}
		if s, err := strconv.Atoi(string(f[3])); err != nil || s != sid {
			continue
		}
		ppid, _ := strconv.Atoi(string(f[1]))
		out = append(out, member{pid: pid, ppid: ppid, state: f[0][0]})
	}
	return out
}
