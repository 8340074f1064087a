package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// HealthCheckTimeout bounds one -healthcheck run.
const HealthCheckTimeout = 5 * time.Second

// HealthCheck asks the grpc.health.v1 service at listenAddr (a listen
// address: an unspecified host such as 0.0.0.0 means this host) whether
// the server is SERVING. It is the -healthcheck mode of every binary, so a
// FROM scratch image, with no shell or curl, has a container healthcheck.
// With useTLS it speaks TLS without verifying the certificate: it checks
// that this host's own listener answers, not who it is.
func HealthCheck(ctx context.Context, listenAddr string, useTLS bool) error {
	host, port, err := net.SplitHostPort(listenAddr)
	if err != nil {
		return fmt.Errorf("healthcheck: address %q: %w", listenAddr, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	creds := insecure.NewCredentials()
	if useTLS {
		creds = credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a liveness probe of our own listener
	}
	conn, err := grpc.NewClient(net.JoinHostPort(host, port), grpc.WithTransportCredentials(creds))
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, HealthCheckTimeout)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return fmt.Errorf("healthcheck %s: %w", listenAddr, err)
	}
	if s := resp.GetStatus(); s != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("healthcheck %s: %s", listenAddr, s)
	}
	return nil
}
