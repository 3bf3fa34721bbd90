//go:build !race

package workclient

const raceEnabled = false
