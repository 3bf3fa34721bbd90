package loopback

import (
	"context"
	"path/filepath"
	"strconv"
)

// redisSpec is a private redis-server on 127.0.0.1:port, without persistence.
func redisSpec(name, port string) (ProcessSpec, error) {
	redis, err := SystemBinary("redis-server", redisBinDirs...)
	if err != nil {
		return ProcessSpec{}, err
	}
	return ProcessSpec{Name: name, Path: redis,
		Args: []string{"--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no"}}, nil
}

// StartRedis starts a private redis-server on a free loopback port, logging to dir/logs, and returns it and
// its address.
func StartRedis(ctx context.Context, dir, name string) (*Process, string, error) {
	port, err := FreePort()
	if err != nil {
		return nil, "", err
	}
	spec, err := redisSpec(name, strconv.Itoa(port))
	if err != nil {
		return nil, "", err
	}
	spec.LogPath = filepath.Join(dir, "logs", name+".log")
	p, err := StartProcess(spec)
	if err != nil {
		return nil, "", err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	if err := waitTCP(ctx, p, nil, addr); err != nil {
		p.Kill()
		return nil, "", err
	}
	return p, addr, nil
}
