package tools

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path"
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
)

// maxEditBytes caps the files edit_file and apply_patch load.
const maxEditBytes = 16 << 20

// abs resolves p against the working directory, for display and calls.
func (s *Set) abs(p string) string {
	if p == "" {
		return s.env.WorkDir
	}
	if path.IsAbs(p) || s.env.WorkDir == "" {
		return path.Clean(p)
	}
	return path.Join(s.env.WorkDir, p)
}

// readBytes reads a whole file through ReadFileBytes.
func (s *Set) readBytes(ctx context.Context, p string) ([]byte, error) {
	stream, err := s.env.Sandbox.ReadFileBytes(ctx, &sandboxv1.ReadFileBytesRequest{SandboxId: s.env.SandboxID, Path: p})
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	for {
		msg, err := stream.Recv()
		if err == io.EOF {
			return buf.Bytes(), nil
		}
		if err != nil {
			return nil, err
		}
		if msg.GetSizeBytes() > maxEditBytes {
			return nil, failed("%s is too large to edit here (%d bytes, at most %d); use shell tools instead", p, msg.GetSizeBytes(), maxEditBytes)
		}
		buf.Write(msg.GetData())
	}
}

func (s *Set) writeBytes(ctx context.Context, p string, data []byte) (*sandboxv1.WriteFileResponse, error) {
	return s.env.Sandbox.WriteFile(ctx, &sandboxv1.WriteFileRequest{SandboxId: s.env.SandboxID, Path: p, Content: data})
}

// fileNotFound rewrites a missing-file status as the seed's "File not
// found" error; other errors pass through.
func fileNotFound(err error, p string) error {
	if isNotFound(err) {
		return failed("File not found: %s", p)
	}
	return err
}

// ---------------------------------------------------------------------------
// read_file

func readFileTool() *tool {
	return &tool{
		name:        "read_file",
		description: "Read a text file from the sandbox. Lines are shown with their numbers (`  1 | text`). Use offset (1-based line) and limit (default 2000 lines) to page through long files.",
		category:    catRead,
		schema: object([]string{"file_path"}, map[string]*schema{
			"file_path": str("Absolute path to the file"),
			"offset":    integer("1-based line number to start reading from (0 and 1 both mean the first line)", 0),
			"limit":     integer("Number of lines to read (default: 2000)", 1),
		}),
		run: runReadFile,
	}
}

type readFileArgs struct {
	FilePath string `json:"file_path"`
	Offset   int64  `json:"offset"`
	Limit    int64  `json:"limit"`
}

func runReadFile(ctx context.Context, s *Set, _ Call, raw []byte) (output, error) {
	a, err := decode[readFileArgs](raw)
	if err != nil {
		return output{}, err
	}
	text, err := s.readNumbered(ctx, a.FilePath, a.Offset, a.Limit)
	if err != nil {
		return output{}, err
	}
	return ok(text)
}

// readNumbered reads a file as read_file shows it, with a note when more
// lines follow.
func (s *Set) readNumbered(ctx context.Context, file string, offset, limit int64) (string, error) {
	p := s.abs(file)
	resp, err := s.env.Sandbox.ReadFile(ctx, &sandboxv1.ReadFileRequest{SandboxId: s.env.SandboxID, Path: p, Offset: offset, Limit: limit})
	if err != nil {
		return "", fileNotFound(err, p)
	}
	switch {
	case resp.GetTotalLines() == 0:
		return "(empty file)", nil
	case resp.GetLineCount() == 0:
		return fmt.Sprintf("(offset %d is past the end of the file, which has %d lines)", offset, resp.GetTotalLines()), nil
	}
	text := resp.GetContent()
	if resp.GetTruncated() {
		last := resp.GetStartLine() + resp.GetLineCount() - 1
		text += fmt.Sprintf("\n[Showing lines %d-%d of %d. Use offset=%d to read more.]\n", resp.GetStartLine(), last, resp.GetTotalLines(), last+1)
	}
	return text, nil
}

// ---------------------------------------------------------------------------
// write_file

func writeFileTool() *tool {
	return &tool{
		name:        "write_file",
		description: "Create a file or overwrite it entirely, creating missing parent directories. For changes to an existing file prefer an edit tool, which only replaces what you name.",
		category:    catWrite,
		schema: object([]string{"file_path", "content"}, map[string]*schema{
			"file_path": str("Absolute path to the file"),
			"content":   str("Content to write"),
		}),
		run: runWriteFile,
	}
}

func runWriteFile(ctx context.Context, s *Set, _ Call, raw []byte) (output, error) {
	a, err := decode[struct {
		FilePath string `json:"file_path"`
		Content  string `json:"content"`
	}](raw)
	if err != nil {
		return output{}, err
	}
	p := s.abs(a.FilePath)
	resp, err := s.writeBytes(ctx, p, []byte(a.Content))
	if err != nil {
		return output{}, err
	}
	verb := "Updated"
	if resp.GetCreated() {
		verb = "Created"
	}
	return ok(fmt.Sprintf("Successfully wrote to %s (%s, %d bytes)", p, strings.ToLower(verb), resp.GetBytesWritten()))
}

// ---------------------------------------------------------------------------
// edit_file

func editFileTool() *tool {
	return &tool{
		name: "edit_file",
		description: "Replace an exact string in an existing file. old_string must match the file's current text exactly (whitespace included) and be unique, " +
			"unless replace_all is true. If it is not unique, add surrounding lines to it. Read the file first.",
		category: catWrite,
		schema: object([]string{"file_path", "old_string", "new_string"}, map[string]*schema{
			"file_path":   str("Absolute path to the file"),
			"old_string":  str("The exact text to find"),
			"new_string":  str("The replacement text"),
			"replace_all": boolean("Replace all occurrences (default: false)"),
		}),
		run: runEditFile,
	}
}

type editArgs struct {
	FilePath   string `json:"file_path"`
	OldString  string `json:"old_string"`
	NewString  string `json:"new_string"`
	ReplaceAll bool   `json:"replace_all"`
}

// lineNumberPrefix matches a read_file prefix ("  12 | ") copied by mistake.
var lineNumberPrefix = regexp.MustCompile(`(?m)^ *\d+ \| `)

func runEditFile(ctx context.Context, s *Set, _ Call, raw []byte) (output, error) {
	a, err := decode[editArgs](raw)
	if err != nil {
		return output{}, err
	}
	if a.OldString == "" {
		return output{}, invalidArgs("old_string must not be empty; use write_file to create or replace a whole file")
	}
	if a.OldString == a.NewString {
		return output{}, invalidArgs("No changes to make: old_string and new_string are the same")
	}
	p := s.abs(a.FilePath)
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	data, err := s.readBytes(ctx, p)
	if err != nil {
		return output{}, fileNotFound(err, p)
	}
	if !utf8.Valid(data) {
		return output{}, failed("%s is not a UTF-8 text file; edit_file cannot change it", p)
	}
	content := string(data)
	oldS, newS := a.OldString, a.NewString
	n := strings.Count(content, oldS)
	if n == 0 && strings.Contains(content, "\r\n") && !strings.Contains(oldS, "\r\n") {
		// The file has CRLF line ends and the model wrote LF.
		if c := strings.Count(content, strings.ReplaceAll(oldS, "\n", "\r\n")); c > 0 {
			oldS, newS, n = strings.ReplaceAll(oldS, "\n", "\r\n"), strings.ReplaceAll(newS, "\n", "\r\n"), c
		}
	}
	if n == 0 && lineNumberPrefix.MatchString(oldS) {
		// The model copied read_file's line numbers along with the text.
		o, nw := lineNumberPrefix.ReplaceAllString(oldS, ""), lineNumberPrefix.ReplaceAllString(newS, "")
		if c := strings.Count(content, o); c > 0 {
			oldS, newS, n = o, nw, c
		}
	}
	switch {
	case n == 0:
		return output{}, invalidArgs("old_string not found in %s. It must match the file's current content exactly, whitespace and indentation included; read the file again and copy the text.", p)
	case n > 1 && !a.ReplaceAll:
		return output{}, invalidArgs("old_string is not unique in %s (found %d occurrences). Include more surrounding context to make it unique, or set replace_all to true to replace every occurrence.", p, n)
	}
	if a.ReplaceAll {
		content = strings.ReplaceAll(content, oldS, newS)
	} else {
		content = strings.Replace(content, oldS, newS, 1)
	}
	if _, err := s.writeBytes(ctx, p, []byte(content)); err != nil {
		return output{}, err
	}
	if n == 1 {
		return ok(fmt.Sprintf("Successfully edited %s (1 replacement)", p))
	}
	return ok(fmt.Sprintf("Successfully edited %s (%d replacements)", p, n))
}

// ---------------------------------------------------------------------------
// read_many_files

func readManyFilesTool() *tool {
	return &tool{
		name:        "read_many_files",
		description: "Read several text files at once. Each file is shown with its line numbers after a `=== path ===` header.",
		category:    catRead,
		schema: object([]string{"paths"}, map[string]*schema{
			"paths": array("Array of absolute file paths", str("")),
		}),
		run: runReadManyFiles,
	}
}

func runReadManyFiles(ctx context.Context, s *Set, _ Call, raw []byte) (output, error) {
	a, err := decode[struct {
		Paths []string `json:"paths"`
	}](raw)
	if err != nil {
		return output{}, err
	}
	if len(a.Paths) == 0 {
		return output{}, invalidArgs("paths must name at least one file")
	}
	type part struct {
		text string
		err  error
	}
	parts := make([]part, len(a.Paths))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, p := range a.Paths {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			parts[i].text, parts[i].err = s.readNumbered(ctx, p, 0, 0)
		})
	}
	wg.Wait()
	var b strings.Builder
	failures := 0
	for i, p := range a.Paths {
		fmt.Fprintf(&b, "=== %s ===\n", s.abs(p))
		if err := parts[i].err; err != nil {
			failures++
			out := s.describe(ctx, err)
			if out.kind == KindSandboxUnavailable || out.kind == KindCancelled {
				return out, nil
			}
			b.WriteString("Error: " + strings.TrimPrefix(out.text, "Error: ") + "\n")
		} else {
			b.WriteString(parts[i].text)
			if !strings.HasSuffix(parts[i].text, "\n") {
				b.WriteByte('\n')
			}
		}
		if i < len(a.Paths)-1 {
			b.WriteByte('\n')
		}
	}
	return output{text: b.String(), failed: failures == len(a.Paths)}, nil
}

// ---------------------------------------------------------------------------
// list_dir

func listDirTool() *tool {
	return &tool{
		name:        "list_dir",
		description: "List a directory's entries, sorted, down to a depth (default 1). Directories end with `/`; nested entries are shown with their path below the directory.",
		category:    catRead,
		schema: object([]string{"path"}, map[string]*schema{
			"path":  str("Directory path to list"),
			"depth": integerRange("Depth of listing (default: 1)", 1, 20),
		}),
		run: runListDir,
	}
}

func runListDir(ctx context.Context, s *Set, _ Call, raw []byte) (output, error) {
	a, err := decode[struct {
		Path  string `json:"path"`
		Depth int32  `json:"depth"`
	}](raw)
	if err != nil {
		return output{}, err
	}
	p := s.abs(a.Path)
	resp, err := ListDirectory(ctx, s.env.Sandbox, &sandboxv1.ListDirectoryRequest{SandboxId: s.env.SandboxID, Path: p, Depth: max(a.Depth, 1)})
	if err != nil {
		if isNotFound(err) {
			return output{}, failed("Directory not found: %s", p)
		}
		return output{}, err
	}
	if len(resp.GetEntries()) == 0 {
		return ok(fmt.Sprintf("%s is empty", p))
	}
	paths := make([]string, len(resp.GetEntries()))
	for i, e := range resp.GetEntries() {
		paths[i] = path.Join(p, e.GetPath())
	}
	keep, note, err := s.conceal(ctx, p, paths)
	if err != nil {
		return output{}, err
	}
	var b strings.Builder
	for i, e := range resp.GetEntries() {
		if !keep[i] {
			continue
		}
		b.WriteString(e.GetPath())
		if e.GetType() == sandboxv1.FileType_FILE_TYPE_DIRECTORY {
			b.WriteByte('/')
		}
		b.WriteByte('\n')
	}
	b.WriteString(note)
	return ok(b.String())
}
