// Package e2e holds the end-to-end tests: whole fleets on loopback (internal/localfleet) driven as a user
// drives them, through the hub's API, the real Argo CD and the managed clusters' apiservers. It has no code
// outside its tests.
package e2e
