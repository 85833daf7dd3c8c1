package testpg

import (
	"context"
	"fmt"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"
)

// startContainer runs postgres:15 under Docker. It returns an error quickly when no Docker
// engine answers, which is the case on machines without one.
func startContainer(ctx context.Context) (string, func(), error) {
	probe, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	provider, err := testcontainers.NewDockerProvider()
	if err != nil {
		return "", nil, fmt.Errorf("no Docker client: %w", err)
	}
	defer provider.Close()
	if err := provider.Health(probe); err != nil {
		return "", nil, fmt.Errorf("Docker engine does not answer: %w", err)
	}
	c, err := tcpostgres.Run(ctx, "postgres:15-alpine",
		tcpostgres.WithUsername("postgres"), tcpostgres.WithPassword("postgres"), tcpostgres.WithDatabase("postgres"),
		testcontainers.WithWaitStrategy(wait.ForLog("database system is ready to accept connections").
			WithOccurrence(2).WithStartupTimeout(2*time.Minute)))
	if err != nil {
		return "", nil, fmt.Errorf("start postgres container: %w", err)
	}
	url, err := c.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		_ = testcontainers.TerminateContainer(c)
		return "", nil, err
	}
	return url, func() { _ = testcontainers.TerminateContainer(c) }, nil
}
