package permission

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// legacySplit is the splitter rules used before ParseShell (kept here as
// the benchmark's baseline): segments between ; & | and newlines, spaces
// collapsed.
func legacySplit(cmd string) []string {
	var out []string
	var cur strings.Builder
	flush := func() {
		if s := strings.Join(strings.Fields(cur.String()), " "); s != "" {
			out = append(out, s)
		}
		cur.Reset()
	}
	for i := 0; i < len(cmd); i++ {
		switch cmd[i] {
		case ';', '|', '&', '\n':
			flush()
		default:
			cur.WriteByte(cmd[i])
		}
	}
	flush()
	return out
}

// legacyDecide is the old evaluation over legacySplit's segments: deny,
// then ask (any segment), then allow (every segment).
func legacyDecide(s *Set, cmd string) Effect {
	segs := legacySplit(cmd)
	for _, l := range []struct {
		rules []*Rule
		all   bool
		eff   Effect
	}{{s.deny, false, Deny}, {s.ask, false, Ask}, {s.allow, true, Allow}} {
		for _, r := range l.rules {
			n := 0
			for _, v := range segs {
				if r.anyRe.MatchString(v) {
					n++
				}
			}
			if !l.all && n > 0 || l.all && n == len(segs) {
				return l.eff
			}
		}
	}
	return None
}

// BenchmarkDecideShell: a 200-character compound command against 50
// rules, parsed (ParseShell + Decide) and split the old way, side by side
// in one run; p50 of each and their ratio.
func BenchmarkDecideShell(b *testing.B) {
	cmd := `cd src && FOO=1 go test ./... 2>&1 | tee /dev/null; if [ -f go.sum ]; then git status --short; fi; echo "$(git rev-parse HEAD)" && ls -la | grep -v vendor || true; make lint && timeout 60 make build`
	cmd += strings.Repeat(" ", max(0, 200-len(cmd)))
	var s Set
	for i := range 50 {
		var text string
		eff := []Effect{Deny, Ask, Allow}[i%3]
		switch i % 5 {
		case 0:
			text = fmt.Sprintf("shell(tool%d *)", i)
		case 1:
			text = fmt.Sprintf("shell(tool%d:*)", i)
		case 2:
			text = fmt.Sprintf("shell(git sub%d *)", i)
		case 3:
			text = fmt.Sprintf("read_file(dir%d/**)", i)
		default:
			text = fmt.Sprintf("shell(make target%d)", i)
		}
		r, err := Parse(eff, text)
		if err != nil {
			b.Fatal(err)
		}
		s.Add(r)
	}
	args := `{"command":` + fmt.Sprintf("%q", cmd) + `}`
	const samples = 2000
	parsed, legacy := make([]time.Duration, 0, samples), make([]time.Duration, 0, samples)
	for b.Loop() {
		for range 10 {
			t0 := time.Now()
			_ = s.Decide("shell", SubjectOf("shell", args, "/work"))
			t1 := time.Now()
			_ = legacyDecide(&s, cmd)
			t2 := time.Now()
			if len(parsed) < samples {
				parsed, legacy = append(parsed, t1.Sub(t0)), append(legacy, t2.Sub(t1))
			}
		}
	}
	p50 := func(d []time.Duration) float64 {
		d = slices.Clone(d)
		slices.Sort(d)
		return float64(d[len(d)/2].Nanoseconds())
	}
	b.ReportMetric(p50(parsed), "parsed-p50-ns")
	b.ReportMetric(p50(legacy), "split-p50-ns")
	b.ReportMetric(p50(parsed)/p50(legacy), "ratio")
}
