//go:build race

package workclient

const raceEnabled = true
