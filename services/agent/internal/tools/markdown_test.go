package tools

import (
	"net/url"
	"strings"
	"testing"
)

func TestHTMLToMarkdown(t *testing.T) {
	base, _ := url.Parse("https://example.com/docs/page")
	tests := []struct {
		name, in, want string
	}{
		{"inline spacing", `<p>foo<b> bar </b>baz</p>`, "foo **bar** baz"},
		{"whitespace collapses", "<p>a\n\n   b\tc</p>", "a b c"},
		{"relative links resolve", `<a href="../x">X</a> <a href="#top">top</a> <a href="javascript:void(0)">js</a>`, "[X](https://example.com/x) top js"},
		{"empty link dropped", `<p>a<a href="/x"> </a>b</p>`, "ab"},
		{"hidden elements dropped", `<p>shown</p><div hidden>secret</div><span aria-hidden="true">icon</span><template>t</template>`, "shown"},
		{"headings", `<h2>Two</h2><h6>Six <em>it</em></h6>`, "## Two\n\n###### Six *it*"},
		{"hr and br", `<p>a<br>b</p><hr><p>c</p>`, "a\nb\n\n---\n\nc"},
		{"pipes in tables", `<table><tr><td>a|b</td></tr></table>`, `| a\|b |`},
		{"data images dropped", `<img src="data:image/png;base64,xx" alt="x"><img src="/i.png">`, ""},
		{"pre keeps blank lines", "<pre>a\n\n\n\nb</pre>", "```\na\n\n\n\nb\n```"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, got, err := htmlToMarkdown(strings.NewReader(tt.in), base)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
