package fake_test

import (
	"testing"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/drivertest"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/fake"
)

// TestContract runs the contract suite unchanged: the fake's stated
// capabilities skip the parts that need real commands.
func TestContract(t *testing.T) {
	drivertest.Run(t, func(*testing.T) driver.Driver { return &fake.Driver{} })
}
