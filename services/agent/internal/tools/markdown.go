package tools

import (
	"fmt"
	"io"
	"net/url"
	"strings"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// htmlToMarkdown converts an HTML page to Markdown: headings, paragraphs,
// links (made absolute against base), emphasis, code, lists, quotes,
// tables and images with alt text. Scripts, styles and other
// non-content elements are dropped. It returns the page title too.
func htmlToMarkdown(r io.Reader, base *url.URL) (title, md string, err error) {
	doc, err := html.Parse(r)
	if err != nil {
		return "", "", err
	}
	c := &mdConv{base: base}
	c.b = &strings.Builder{}
	c.node(doc)
	return strings.TrimSpace(c.title), cleanMarkdown(c.b.String()), nil
}

type mdConv struct {
	b     *strings.Builder
	base  *url.URL
	title string
	lists []mdList
	// prev is the last byte written before the current capture began, so
	// a capture's leading space is kept when it separates words.
	prev byte
}

type mdList struct {
	ordered bool
	n       int
}

// skipped elements hold no readable content.
var skipped = map[atom.Atom]bool{
	atom.Script: true, atom.Style: true, atom.Noscript: true, atom.Template: true, atom.Svg: true,
	atom.Iframe: true, atom.Object: true, atom.Embed: true, atom.Canvas: true, atom.Head: true,
	atom.Input: true, atom.Select: true, atom.Textarea: true, atom.Button: true, atom.Math: true,
}

var blocks = map[atom.Atom]bool{
	atom.P: true, atom.Div: true, atom.Section: true, atom.Article: true, atom.Main: true,
	atom.Header: true, atom.Footer: true, atom.Nav: true, atom.Aside: true, atom.Figure: true,
	atom.Figcaption: true, atom.Dl: true, atom.Dt: true, atom.Dd: true, atom.Address: true,
	atom.Details: true, atom.Summary: true, atom.Form: true, atom.Fieldset: true, atom.Caption: true,
}

// blank ends the current block with an empty line.
func (c *mdConv) blank() {
	s := c.b.String()
	switch {
	case s == "" || strings.HasSuffix(s, "\n\n"):
	case strings.HasSuffix(s, "\n"):
		c.b.WriteByte('\n')
	default:
		c.b.WriteString("\n\n")
	}
}

func (c *mdConv) newline() {
	if s := c.b.String(); s != "" && !strings.HasSuffix(s, "\n") {
		c.b.WriteByte('\n')
	}
}

// capture renders n's children alone and returns the text.
func (c *mdConv) capture(n *html.Node) string {
	saved, savedPrev := c.b, c.prev
	c.prev = c.last()
	c.b = &strings.Builder{}
	c.children(n)
	out := c.b.String()
	c.b, c.prev = saved, savedPrev
	return out
}

// last is the last byte written, looking through captures.
func (c *mdConv) last() byte {
	if cur := c.b.String(); cur != "" {
		return cur[len(cur)-1]
	}
	return c.prev
}

func (c *mdConv) children(n *html.Node) {
	for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
		c.node(ch)
	}
}

func (c *mdConv) text(s string) {
	last := c.last()
	space := false
	for _, r := range s {
		if r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\f' {
			space = true
			continue
		}
		if space && last != 0 && last != ' ' && last != '\n' {
			c.b.WriteByte(' ')
		}
		space = false
		c.b.WriteRune(r)
		last = 'x'
	}
	if space && last != 0 && last != ' ' && last != '\n' {
		c.b.WriteByte(' ')
	}
}

// inline wraps n's content in a marker, keeping surrounding spaces out.
func (c *mdConv) inline(n *html.Node, open, close string) {
	inner := c.capture(n)
	t := strings.TrimSpace(inner)
	if t == "" {
		c.b.WriteString(inner)
		return
	}
	if strings.HasPrefix(inner, " ") {
		c.b.WriteByte(' ')
	}
	c.b.WriteString(open + t + close)
	if strings.HasSuffix(inner, " ") {
		c.b.WriteByte(' ')
	}
}

func (c *mdConv) attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func hasAttr(n *html.Node, key string) bool {
	for _, a := range n.Attr {
		if a.Key == key {
			return true
		}
	}
	return false
}

func (c *mdConv) resolve(ref string) string {
	u, err := url.Parse(strings.TrimSpace(ref))
	if err != nil || c.base == nil {
		return ref
	}
	return c.base.ResolveReference(u).String()
}

func (c *mdConv) node(n *html.Node) {
	switch n.Type {
	case html.TextNode:
		c.text(n.Data)
		return
	case html.DocumentNode:
		c.children(n)
		return
	case html.ElementNode:
	default:
		return
	}
	if n.DataAtom == atom.Title && c.title == "" {
		c.title = textContent(n)
		return
	}
	if n.DataAtom == atom.Head {
		for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
			if ch.DataAtom == atom.Title {
				c.node(ch)
			}
		}
		return
	}
	if skipped[n.DataAtom] || hasAttr(n, "hidden") || strings.EqualFold(c.attr(n, "aria-hidden"), "true") {
		return
	}
	switch a := n.DataAtom; {
	case headingLevel(a) > 0:
		c.blank()
		c.b.WriteString(strings.Repeat("#", headingLevel(a)) + " " + oneLine(c.capture(n)))
		c.blank()
	case blocks[a]:
		c.blank()
		c.children(n)
		c.blank()
	case a == atom.Br:
		c.b.WriteByte('\n')
	case a == atom.Hr:
		c.blank()
		c.b.WriteString("---")
		c.blank()
	case a == atom.A:
		href := c.attr(n, "href")
		inner := c.capture(n)
		t := oneLine(inner)
		if t == "" {
			return
		}
		if href == "" || strings.HasPrefix(href, "#") || strings.HasPrefix(strings.ToLower(href), "javascript:") {
			c.text(inner)
			return
		}
		if strings.HasPrefix(inner, " ") {
			c.text(" ")
		}
		fmt.Fprintf(c.b, "[%s](%s)", t, c.resolve(href))
		if strings.HasSuffix(inner, " ") {
			c.b.WriteByte(' ')
		}
	case a == atom.Img:
		alt, src := strings.TrimSpace(c.attr(n, "alt")), c.attr(n, "src")
		if alt != "" && src != "" && !strings.HasPrefix(src, "data:") {
			fmt.Fprintf(c.b, "![%s](%s)", alt, c.resolve(src))
		}
	case a == atom.Strong || a == atom.B:
		c.inline(n, "**", "**")
	case a == atom.Em || a == atom.I:
		c.inline(n, "*", "*")
	case a == atom.Del || a == atom.S:
		c.inline(n, "~~", "~~")
	case a == atom.Code || a == atom.Kbd || a == atom.Samp:
		c.inline(n, "`", "`")
	case a == atom.Pre:
		c.blank()
		lang := codeLanguage(c.attr(n, "class"))
		if code := n.FirstChild; lang == "" && code != nil && code.DataAtom == atom.Code {
			lang = codeLanguage(c.attr(code, "class"))
		}
		c.b.WriteString("```" + lang + "\n" + strings.Trim(textContent(n), "\n") + "\n```")
		c.blank()
	case a == atom.Ul || a == atom.Ol:
		if len(c.lists) == 0 {
			c.blank()
		} else {
			c.newline()
		}
		c.lists = append(c.lists, mdList{ordered: a == atom.Ol})
		c.children(n)
		c.lists = c.lists[:len(c.lists)-1]
		if len(c.lists) == 0 {
			c.blank()
		}
	case a == atom.Li:
		c.newline()
		marker := "- "
		if len(c.lists) > 0 {
			l := &c.lists[len(c.lists)-1]
			l.n++
			if l.ordered {
				marker = fmt.Sprintf("%d. ", l.n)
			}
		}
		// Nested lists are rendered inside this capture; indenting the
		// continuation lines by the marker's width nests them.
		inner := strings.Trim(c.capture(n), " \n")
		c.b.WriteString(marker + strings.ReplaceAll(inner, "\n", "\n"+strings.Repeat(" ", len(marker))))
		c.b.WriteByte('\n')
	case a == atom.Blockquote:
		c.blank()
		inner := strings.TrimSpace(cleanMarkdown(c.capture(n)))
		c.b.WriteString("> " + strings.ReplaceAll(inner, "\n", "\n> "))
		c.blank()
	case a == atom.Table:
		c.blank()
		c.table(n)
		c.blank()
	default:
		c.children(n)
	}
}

func (c *mdConv) table(n *html.Node) {
	var rows [][]string
	header := false
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
			switch ch.DataAtom {
			case atom.Tr:
				var row []string
				for cell := ch.FirstChild; cell != nil; cell = cell.NextSibling {
					if cell.DataAtom == atom.Td || cell.DataAtom == atom.Th {
						if cell.DataAtom == atom.Th && len(rows) == 0 {
							header = true
						}
						row = append(row, strings.ReplaceAll(oneLine(c.capture(cell)), "|", `\|`))
					}
				}
				rows = append(rows, row)
			case atom.Thead, atom.Tbody, atom.Tfoot:
				walk(ch)
			}
		}
	}
	walk(n)
	for i, row := range rows {
		c.b.WriteString("| " + strings.Join(row, " | ") + " |\n")
		if i == 0 && header {
			c.b.WriteString(strings.Repeat("| --- ", len(row)) + "|\n")
		}
	}
}

func headingLevel(a atom.Atom) int {
	switch a {
	case atom.H1:
		return 1
	case atom.H2:
		return 2
	case atom.H3:
		return 3
	case atom.H4:
		return 4
	case atom.H5:
		return 5
	case atom.H6:
		return 6
	}
	return 0
}

func codeLanguage(class string) string {
	for f := range strings.FieldsSeq(class) {
		if l, ok := strings.CutPrefix(f, "language-"); ok {
			return l
		}
		if l, ok := strings.CutPrefix(f, "lang-"); ok {
			return l
		}
	}
	return ""
}

// textContent is the raw text below n, scripts and styles left out.
func textContent(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		if n.Type == html.ElementNode && (n.DataAtom == atom.Script || n.DataAtom == atom.Style) {
			return
		}
		if n.Type == html.ElementNode && n.DataAtom == atom.Br {
			b.WriteByte('\n')
		}
		for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
			walk(ch)
		}
	}
	walk(n)
	return b.String()
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// cleanMarkdown trims trailing spaces and collapses runs of blank lines,
// leaving fenced code as it is.
func cleanMarkdown(s string) string {
	lines := strings.Split(s, "\n")
	out := make([]string, 0, len(lines))
	fence, blanks := false, 0
	for _, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fence = !fence
		}
		if !fence {
			l = strings.TrimRight(l, " \t")
			if l == "" {
				blanks++
				if blanks > 1 {
					continue
				}
			} else {
				blanks = 0
			}
		}
		out = append(out, l)
	}
	return strings.TrimSpace(strings.Join(out, "\n"))
}
