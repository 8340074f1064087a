// Package mcptest is a real MCP server built with the official Go SDK, for
// tests: over stdio when a test binary re-executes itself with ServeEnv
// set, or over streamable HTTP in the test process.
package mcptest

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ServeEnv makes MaybeServe run the server on stdio and exit.
const ServeEnv = "FABRO_MCPTEST_SERVE"

// PNG is the image the image tool returns.
var PNG = []byte("\x89PNG\r\n\x1a\nfake-image-bytes")

type textArgs struct {
	Text string `json:"text" jsonschema:"the text"`
}

type bigArgs struct {
	Chars int `json:"chars" jsonschema:"how many characters"`
}

// NewServer returns the server: echo, upper, image, fail, big, crash, and
// bad (whose input schema is not valid JSON Schema).
func NewServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "mcptest", Version: "v1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Returns the text."}, func(_ context.Context, _ *mcp.CallToolRequest, a textArgs) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: a.Text}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "upper", Description: "Upper-cases the text."}, func(_ context.Context, _ *mcp.CallToolRequest, a textArgs) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.ToUpper(a.Text)}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "image", Description: "Returns an image."}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "a picture"}, &mcp.ImageContent{MIMEType: "image/png", Data: PNG}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "Fails."}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "it went wrong"}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "big", Description: "Returns chars characters."}, func(_ context.Context, _ *mcp.CallToolRequest, a bigArgs) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("x", a.Chars)}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "crash", Description: "Exits the server."}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		os.Exit(3)
		return nil, nil, nil
	})
	s.AddTool(&mcp.Tool{Name: "bad", Description: "Has a broken schema.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"minimum":"ten"}}}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	return s
}

// MaybeServe serves on stdio and exits when ServeEnv is set; call it
// first in TestMain.
func MaybeServe() {
	if os.Getenv(ServeEnv) == "" {
		return
	}
	if err := NewServer().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		os.Exit(1)
	}
	os.Exit(0)
}

// Handler serves the server over streamable HTTP.
func Handler() http.Handler {
	s := NewServer()
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
}
