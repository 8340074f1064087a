package fakeprovider

import (
	"context"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	"github.com/google/go-cmp/cmp"
)

// The official Go SDK is the oracle for the bedrock renderer: it parses our
// event-stream frames (CRCs included) and our Converse JSON.

// sdkClient serves h the way the SDK reaches Bedrock, over TLS where its
// default transport (ForceAttemptHTTP2) negotiates HTTP/2, and returns an SDK
// client on that default HTTP client, trusting the test certificate.
//
// Not plain-HTTP httptest: over HTTP/1.1, smithy-go v1.28.9 drops the
// connection under an event stream whenever the server answers before
// net/http's writeLoop has finished the request. ClientHandler closes the
// request body as soon as Do returns; the closed body's WriteTo then returns
// io.EOF, which net/http's post-Content-Length drain of the body reports as a
// write error, and the writeLoop closes the connection: the stream ends in
// "decode event: ... use of closed network connection". A fake answering in
// microseconds hits that window. Over HTTP/2 END_STREAM follows the last read
// of the body, so no server can answer before it.
func sdkClient(t *testing.T, h http.Handler) *bedrockruntime.Client {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			t.Errorf("the SDK reached the fake over %s, want HTTP/2", r.Proto)
		}
		h.ServeHTTP(w, r)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	return bedrockruntime.New(bedrockruntime.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(srv.URL),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "secret", Source: "test"}, nil
		}),
		HTTPClient: awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
			tr.TLSClientConfig.RootCAs = roots
		}),
		RetryMaxAttempts: 1,
	})
}

const sdkModel = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"

func sdkMessages() []types.Message {
	return []types.Message{{Role: types.ConversationRoleUser, Content: []types.ContentBlock{&types.ContentBlockMemberText{Value: "Weather in Paris?"}}}}
}

// sdkReply is what the SDK saw, in the script's terms.
type sdkReply struct {
	Reasoning, Signature, Text string
	Tools                      []ToolCall
	StopReason                 string
	Usage                      Usage
}

var scriptedTurn = Turn{
	Reasoning: "Need the weather — 天気.",
	Text:      "Checking 😀 \"now\".",
	ToolCalls: []ToolCall{
		{ID: "tooluse_a", Name: "get_weather", Arguments: `{"city":"Paris"}`},
		{ID: "tooluse_b", Name: "get_time", Arguments: `{"tz":"Europe/Paris"}`},
	},
	Usage:      Usage{Input: 12, Output: 40, CacheRead: 2048, CacheWrite: 100},
	ChunkRunes: 4,
}

func wantReply(t Turn) sdkReply {
	return sdkReply{
		Reasoning: t.Reasoning, Signature: bedrockSignature(t.Reasoning), Text: t.Text,
		Tools: t.ToolCalls, StopReason: bedrockStopReason(t), Usage: t.Usage,
	}
}

func usageOf(u *types.TokenUsage) Usage {
	if u == nil {
		return Usage{}
	}
	i := func(p *int32) int { return int(aws.ToInt32(p)) }
	if got, want := i(u.TotalTokens), i(u.InputTokens)+i(u.OutputTokens)+i(u.CacheReadInputTokens)+i(u.CacheWriteInputTokens); got != want {
		panic("totalTokens is not the sum of its parts")
	}
	return Usage{Input: i(u.InputTokens), Output: i(u.OutputTokens), CacheRead: i(u.CacheReadInputTokens), CacheWrite: i(u.CacheWriteInputTokens)}
}

func TestBedrockSDKConverseStream(t *testing.T) {
	fake := New(scriptedTurn)
	out, err := sdkClient(t, fake).ConverseStream(t.Context(), &bedrockruntime.ConverseStreamInput{ModelId: aws.String(sdkModel), Messages: sdkMessages()})
	if err != nil {
		t.Fatal(err)
	}
	stream := out.GetStream()
	defer stream.Close()
	var got sdkReply
	tools := map[int32]int{}
	var sequence []string
	for ev := range stream.Events() {
		switch v := ev.(type) {
		case *types.ConverseStreamOutputMemberMessageStart:
			sequence = append(sequence, "messageStart")
		case *types.ConverseStreamOutputMemberContentBlockStart:
			sequence = append(sequence, "contentBlockStart")
			if tu, ok := v.Value.Start.(*types.ContentBlockStartMemberToolUse); ok {
				tools[aws.ToInt32(v.Value.ContentBlockIndex)] = len(got.Tools)
				got.Tools = append(got.Tools, ToolCall{ID: aws.ToString(tu.Value.ToolUseId), Name: aws.ToString(tu.Value.Name)})
			}
		case *types.ConverseStreamOutputMemberContentBlockDelta:
			switch d := v.Value.Delta.(type) {
			case *types.ContentBlockDeltaMemberText:
				got.Text += d.Value
			case *types.ContentBlockDeltaMemberToolUse:
				got.Tools[tools[aws.ToInt32(v.Value.ContentBlockIndex)]].Arguments += aws.ToString(d.Value.Input)
			case *types.ContentBlockDeltaMemberReasoningContent:
				switch r := d.Value.(type) {
				case *types.ReasoningContentBlockDeltaMemberText:
					got.Reasoning += r.Value
				case *types.ReasoningContentBlockDeltaMemberSignature:
					got.Signature = r.Value
				}
			}
		case *types.ConverseStreamOutputMemberContentBlockStop:
			sequence = append(sequence, "contentBlockStop")
		case *types.ConverseStreamOutputMemberMessageStop:
			sequence = append(sequence, "messageStop")
			got.StopReason = string(v.Value.StopReason)
		case *types.ConverseStreamOutputMemberMetadata:
			sequence = append(sequence, "metadata")
			got.Usage = usageOf(v.Value.Usage)
		default:
			t.Errorf("unexpected event %T", ev)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream error: %v", err)
	}
	if diff := cmp.Diff(wantReply(scriptedTurn), got); diff != "" {
		t.Errorf("reply (-want +got):\n%s", diff)
	}
	wantSeq := []string{"messageStart", "contentBlockStop", "contentBlockStop", "contentBlockStart", "contentBlockStop", "contentBlockStart", "contentBlockStop", "messageStop", "metadata"}
	if diff := cmp.Diff(wantSeq, sequence); diff != "" {
		t.Errorf("event sequence (-want +got):\n%s", diff)
	}
	if r := fake.Requests(); len(r) != 1 || r[0].Path != "/model/"+sdkModel+"/converse-stream" {
		t.Errorf("requests = %+v", r)
	}
}

func TestBedrockSDKConverse(t *testing.T) {
	out, err := sdkClient(t, New(scriptedTurn)).Converse(t.Context(), &bedrockruntime.ConverseInput{ModelId: aws.String(sdkModel), Messages: sdkMessages()})
	if err != nil {
		t.Fatal(err)
	}
	msg, ok := out.Output.(*types.ConverseOutputMemberMessage)
	if !ok {
		t.Fatalf("output %T", out.Output)
	}
	got := sdkReply{StopReason: string(out.StopReason), Usage: usageOf(out.Usage)}
	for _, b := range msg.Value.Content {
		switch v := b.(type) {
		case *types.ContentBlockMemberText:
			got.Text += v.Value
		case *types.ContentBlockMemberReasoningContent:
			rt, ok := v.Value.(*types.ReasoningContentBlockMemberReasoningText)
			if !ok {
				t.Fatalf("reasoning %T", v.Value)
			}
			got.Reasoning, got.Signature = aws.ToString(rt.Value.Text), aws.ToString(rt.Value.Signature)
		case *types.ContentBlockMemberToolUse:
			args, err := v.Value.Input.MarshalSmithyDocument()
			if err != nil {
				t.Fatal(err)
			}
			got.Tools = append(got.Tools, ToolCall{ID: aws.ToString(v.Value.ToolUseId), Name: aws.ToString(v.Value.Name), Arguments: string(args)})
		default:
			t.Errorf("unexpected block %T", b)
		}
	}
	if diff := cmp.Diff(wantReply(scriptedTurn), got); diff != "" {
		t.Errorf("reply (-want +got):\n%s", diff)
	}
}

func TestBedrockSDKFaults(t *testing.T) {
	tests := []struct {
		name   string
		fault  Fault
		stream bool
		check  func(error) bool
	}{
		{"throttling", Fault{Kind: FaultRateLimit, RetryAfter: time.Second}, false, func(err error) bool { var e *types.ThrottlingException; return errors.As(err, &e) }},
		{"overloaded", Fault{Kind: FaultOverloaded}, false, func(err error) bool { var e *types.ServiceUnavailableException; return errors.As(err, &e) }},
		{"server error", Fault{Kind: FaultServerError}, true, func(err error) bool { var e *types.InternalServerException; return errors.As(err, &e) }},
		{"model error", Fault{Kind: FaultMidStreamError}, false, func(err error) bool { var e *types.ModelErrorException; return errors.As(err, &e) }},
		{"mid-stream exception frame", Fault{Kind: FaultMidStreamError, AfterChunks: 2}, true, func(err error) bool {
			var e *types.ModelStreamErrorException
			return errors.As(err, &e) && aws.ToInt32(e.OriginalStatusCode) == 500
		}},
		{"bad CRC", Fault{Kind: FaultMalformedChunk, AfterChunks: 2}, true, func(err error) bool { return err != nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			turn := scriptedTurn
			turn.Fault = &tt.fault
			c := sdkClient(t, New(turn))
			var err error
			if tt.stream {
				var out *bedrockruntime.ConverseStreamOutput
				out, err = c.ConverseStream(t.Context(), &bedrockruntime.ConverseStreamInput{ModelId: aws.String(sdkModel), Messages: sdkMessages()})
				if err == nil {
					stream := out.GetStream()
					n := 0
					for range stream.Events() {
						n++
					}
					err = stream.Err()
					stream.Close()
					if n == 0 {
						t.Errorf("no events before the fault")
					}
				}
			} else {
				_, err = c.Converse(t.Context(), &bedrockruntime.ConverseInput{ModelId: aws.String(sdkModel), Messages: sdkMessages()})
			}
			if !tt.check(err) {
				t.Fatalf("err = %T %v", err, err)
			}
		})
	}
}

// TestEventstreamFrameGolden checks the encoder against the golden frames in
// the reference notes (computed with Python struct/zlib.crc32).
func TestEventstreamFrameGolden(t *testing.T) {
	got := hex.EncodeToString(eventstreamFrame([][2]string{
		{":event-type", "contentBlockDelta"}, {":content-type", "application/json"}, {":message-type", "event"},
	}, []byte(`{"contentBlockIndex":0,"delta":{"text":"Hi"}}`)))
	const want = "0000009400000057b4ab9aee0b3a6576656e742d74797065070011636f6e74656e74426c6f636b44656c74610d3a636f6e74656e742d747970650700106170706c69636174696f6e2f6a736f6e0d3a6d6573736167652d747970650700056576656e747b22636f6e74656e74426c6f636b496e646578223a302c2264656c7461223a7b2274657874223a224869227d7d1f944657"
	if got != want {
		t.Fatalf("frame\n got %s\nwant %s", got, want)
	}
}
