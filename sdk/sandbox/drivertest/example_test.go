package drivertest_test

import (
	"testing"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/drivertest"
)

// newDriver stands for a driver under test (mydriver.New(mydriver.Config{})).
var newDriver func() driver.Driver

// A driver's own test runs the contract suite against it: each part gets a
// driver of its own from the factory.
func ExampleRun() {
	testContract := func(t *testing.T) {
		drivertest.Run(t, func(t *testing.T) driver.Driver { return newDriver() })
	}
	_ = testContract // func TestContract(t *testing.T) in the driver's package
}
