package local

import (
	"fmt"
	"path/filepath"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// missingDirs lists rel and its parents inside the workspace that do not
// exist yet, outermost first: what a MkdirAll of rel will create.
func (s *sandbox) missingDirs(rel string) []string {
	var out []string
	for d := filepath.Clean(rel); d != "." && d != string(filepath.Separator); d = filepath.Dir(d) {
		if _, err := s.root.Lstat(d); err == nil {
			break
		}
		out = append([]string{d}, out...)
	}
	return out
}

// adopt hands paths the service created in the workspace (relative to it)
// to the user its commands run as, so that they can change them too.
func (s *sandbox) adopt(rels ...string) error {
	for _, rel := range rels {
		if err := s.user.adopt(s.root, rel); err != nil {
			return fmt.Errorf("%w: give %s to the command user: %v", driver.ErrUnavailable, rel, err)
		}
	}
	return nil
}
