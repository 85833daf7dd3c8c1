package testpg

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"
)

// SourceDocker is the value of QL_TEST_SOURCE that takes the server from Docker only.
const SourceDocker = "docker"

// DefaultImage is the image the Docker path runs unless QL_PG_IMAGE names another.
const DefaultImage = "postgres:15"

// Image is the Docker image of the Docker path: QL_PG_IMAGE, else DefaultImage.
func Image() string {
	if img := os.Getenv("QL_PG_IMAGE"); img != "" {
		return img
	}
	return DefaultImage
}

// startContainer runs image under Docker through testcontainers-go's postgres module. It
// returns an error quickly when no Docker engine answers, which is the case on machines without
// one.
func startContainer(ctx context.Context, image string) (string, func(), error) {
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
	// The official image's entry point logs "ready to accept connections" twice: once from the
	// temporary server that initialises the database, once from the real one.
	c, err := tcpostgres.Run(ctx, image,
		tcpostgres.WithUsername("postgres"), tcpostgres.WithPassword("postgres"), tcpostgres.WithDatabase("postgres"),
		testcontainers.WithWaitStrategy(wait.ForLog("database system is ready to accept connections").
			WithOccurrence(2).WithStartupTimeout(2*time.Minute)))
	if err != nil {
		if c != nil { // a container that started but never got ready
			_ = testcontainers.TerminateContainer(c)
		}
		return "", nil, fmt.Errorf("start postgres container (image %s, QL_PG_IMAGE): %w", image, err)
	}
	url, err := c.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		_ = testcontainers.TerminateContainer(c)
		return "", nil, err
	}
	return url, func() { _ = testcontainers.TerminateContainer(c) }, nil
}
