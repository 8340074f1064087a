package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// outputFlag is --output (-o) of the listing and show commands: text for
// people (the default), or json for scripts: the response as the REST API
// writes it (the same field names, zero values included), every page in
// one document.
type outputFlag struct{ format string }

func newOutputFlag(fs *flag.FlagSet) *outputFlag {
	o := &outputFlag{format: "text"}
	set := func(v string) error {
		if v != "text" && v != "json" {
			return fmt.Errorf("want text or json, not %q", v)
		}
		o.format = v
		return nil
	}
	fs.Func("output", "output format: text or json (the REST API's fields, for scripts)", set)
	fs.Func("o", "shorthand for --output", set)
	return o
}

func (o *outputFlag) json() bool { return o.format == "json" }

// print writes m as the REST API would, indented, with a final newline.
func (o *outputFlag) print(w io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{EmitDefaultValues: true}.Marshal(m)
	if err != nil {
		return err
	}
	// protojson varies its white space on purpose; re-indenting makes the
	// output stable (a script may diff it).
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err = w.Write(buf.Bytes())
	return err
}
