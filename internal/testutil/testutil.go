// Package testutil holds what the tests of several packages share: waiting for a condition (Eventually,
// Consistently) and the hub fixtures they all create (a direct client, a namespace, an ApplicationSet).
// It is imported by tests only; Main (TestMain's hook) starts a test package's processes through
// internal/loopback. It must not import a package under test (hubmanager, application, …): their tests import it.
package testutil

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// Timeout is how long Eventually waits.
const Timeout = 30 * time.Second

// poll is how often a condition is checked.
const poll = 100 * time.Millisecond

// Eventually calls check until it returns nil, and fails the test with what and check's last error when
// Timeout passes first.
func Eventually(t testing.TB, what string, check func() error) {
	t.Helper()
	EventuallyWithin(t, Timeout, what, check)
}

// EventuallyWithin is Eventually with its own timeout. check runs at least once.
func EventuallyWithin(t testing.TB, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v (after %s)", what, err, timeout)
		}
		time.Sleep(poll)
	}
}

// EventuallyTrue is EventuallyWithin for a condition that has no error to tell.
func EventuallyTrue(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	EventuallyWithin(t, timeout, what, func() error {
		if !cond() {
			return errNotYet
		}
		return nil
	})
}

var errNotYet = errors.New("the condition does not hold")

// Consistently calls check for the duration d and fails the test as soon as it returns an error.
func Consistently(t testing.TB, what string, d time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if err := check(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(poll)
	}
}

// Client returns a direct (uncached) client, with watches, of the cluster at cfg. scheme is the hub's
// (hubmanager.Scheme) for every test that can import it.
func Client(t testing.TB, cfg *rest.Config, scheme *runtime.Scheme) client.WithWatch {
	t.Helper()
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// CreateNamespace creates a namespace; one that exists already is fine.
func CreateNamespace(t testing.TB, c client.Client, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// CreateAppSet creates an ApplicationSet with an empty list generator: with or without an ApplicationSet
// controller it generates nothing, the test creates the Applications it owns.
func CreateAppSet(t testing.TB, c client.Client, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(argocd.ApplicationSetGVK)
	u.SetNamespace(ns)
	u.SetName(name)
	u.Object["spec"] = map[string]any{
		"generators": []any{map[string]any{"list": map[string]any{"elements": []any{}}}},
		"template": map[string]any{
			"metadata": map[string]any{"name": "{{name}}"},
			"spec":     map[string]any{"project": "default", "destination": map[string]any{"server": argocd.InClusterServer}},
		},
	}
	if err := c.Create(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	return u
}
