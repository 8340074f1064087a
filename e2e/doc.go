// Package e2e holds the tests that cross services: each test package here
// starts two or more real services (in process, over real gRPC) and talks
// to them only through their public Go APIs and their wire contracts, so
// that no service module has to require another one. See
// docs/ARCHITECTURE.md ("Module boundaries").
package e2e
