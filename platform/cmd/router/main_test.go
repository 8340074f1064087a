package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRoutesFlag(t *testing.T) {
	for _, tt := range []struct {
		in      []string
		want    []string // keys=target
		wantErr string
	}{
		{in: []string{"a.S,b.T=vault:7704"}, want: []string{"a.S,b.T=vault:7704"}},
		{in: []string{"a.S=x:1; b.T=y:2", "c.U=z:3"}, want: []string{"a.S=x:1", "b.T=y:2", "c.U=z:3"}},
		{in: []string{"/v1/llm,/openai=http://llmgateway:7781;"}, want: []string{"/v1/llm,/openai=http://llmgateway:7781"}},
		{in: []string{"a.S"}, wantErr: "want NAME[,NAME...]=TARGET"},
		{in: []string{"=x:1"}, wantErr: "want NAME"},
		{in: []string{"a.S="}, wantErr: "want NAME"},
	} {
		t.Run(strings.Join(tt.in, "|"), func(t *testing.T) {
			var r routes
			var err error
			for _, v := range tt.in {
				if err = r.Set(v); err != nil {
					break
				}
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range r {
				got = append(got, strings.Join(e.keys, ",")+"="+e.target)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("routes (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRunRefuses checks the start-up refusals: a non-loopback listener
// without -insecure, no gRPC route, and a bad REST backend.
func TestRunRefuses(t *testing.T) {
	for _, tt := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"-grpc-addr", "0.0.0.0:0", "-http-addr", "", "-grpc-route", "a.S=x:1"}, "needs -insecure"},
		{[]string{"-grpc-addr", "127.0.0.1:0", "-http-addr", ""}, "no gRPC route"},
		{[]string{"-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-grpc-route", "a.S=x:1", "-http-route", "/v1=ftp://x"}, "want http://host:port"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			err := run(t.Context(), tt.args)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("run = %v, want %q", err, tt.wantErr)
			}
		})
	}
}
