package driver_test

import (
	"fmt"
	"strings"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// A driver drains a command's output into a Capture: however much the
// command prints, the head and the tail are kept within the limit, and the
// stats say how much was left out.
func ExampleCapture() {
	c := driver.NewCapture(8)
	fmt.Fprint(c, "head")
	fmt.Fprint(c, strings.Repeat(".", 1000))
	fmt.Fprint(c, "tail")

	st := c.Stats()
	fmt.Printf("%q observed %d, retained %d, omitted %d\n", c.Bytes(), st.Observed, st.Retained, st.Omitted)
	// Output: "headtail" observed 1008, retained 8, omitted 1000
}
