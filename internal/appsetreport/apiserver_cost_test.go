package appsetreport_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/api/v1alpha1"
	"github.com/argocd-pull/argocd-pull/internal/appsetreport"
	"github.com/argocd-pull/argocd-pull/internal/hubmanager"
)

// BenchmarkReportWriteAPIServerCPU measures what one write of a report costs the hub apiserver, in CPU ms per
// write read from its /proc/<pid>/stat: a report in mid-rollout, 300 clusters of which 200 are not
// Synced/Healthy yet and listed, one of them changed before each write, answered with the metadata alone.
// "update" writes it as the controller does (writeBody and writeRequest: an update of the current report,
// without field validation); for comparison, "apply" as the controller did before (server-side apply, its field
// owner, forced, the default field validation), "apply-no-validation" with the field validation off, and
// "merge-patch" the same body as a JSON merge patch.
//
//	go test -run x -bench BenchmarkReportWriteAPIServerCPU -benchtime 200x ./internal/appsetreport
func BenchmarkReportWriteAPIServerCPU(b *testing.B) {
	b.Run("update", benchmarkReportUpdate)
	b.Run("apply", func(b *testing.B) { benchmarkReportPatch(b, types.ApplyPatchType, "") })
	b.Run("apply-no-validation", func(b *testing.B) {
		benchmarkReportPatch(b, types.ApplyPatchType, metav1.FieldValidationIgnore)
	})
	b.Run("merge-patch", func(b *testing.B) { benchmarkReportPatch(b, types.MergePatchType, "") })
}

// benchmarkReportUpdate writes the report as the controller does, the answer's resourceVersion (which the
// controller's cache would bring) the next update's precondition.
func benchmarkReportUpdate(b *testing.B) {
	ctx := context.Background()
	hc, err := rest.HTTPClientFor(env.Hub.Config())
	if err != nil {
		b.Fatal(err)
	}
	rc, err := appsetreport.NewRESTClient(env.Hub.Config(), hc)
	if err != nil {
		b.Fatal(err)
	}
	desired := &v1alpha1.MulticlusterApplicationSetReport{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "MulticlusterApplicationSetReport"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("cost-%d", time.Now().UnixNano())},
		Statuses:   midRollout(300, 200),
	}
	var current *v1alpha1.MulticlusterApplicationSetReport
	write := func(i int) int {
		conditions := desired.Statuses.ClusterConditions
		conditions[i%len(conditions)].OperationStateStartedAt = time.Now().UTC().Format(time.RFC3339Nano)
		data, err := json.Marshal(appsetreport.WriteBody(current, desired))
		if err != nil {
			b.Fatal(err)
		}
		req, _ := appsetreport.WriteRequest(rc, current, desired, data)
		answer, err := req.Do(ctx).Raw()
		if err != nil {
			b.Fatal(err)
		}
		var meta metav1.PartialObjectMetadata
		if err := json.Unmarshal(answer, &meta); err != nil {
			b.Fatal(err)
		}
		// What writeBody reads of the current report: its metadata (the statuses are replaced).
		current = &v1alpha1.MulticlusterApplicationSetReport{ObjectMeta: meta.ObjectMeta}
		return len(data)
	}
	size := write(0) // the create is not measured
	measureWrites(b, write, size)
}

func benchmarkReportPatch(b *testing.B, patchType types.PatchType, validation string) {
	ctx := context.Background()
	c, err := client.New(env.Hub.Config(), client.Options{Scheme: hubmanager.Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	statuses := midRollout(300, 200)
	name := fmt.Sprintf("cost-%d", time.Now().UnixNano())
	body := map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "MulticlusterApplicationSetReport",
		"metadata": map[string]any{"namespace": "default", "name": name}, "statuses": statuses,
	}
	write := func(i int) int {
		statuses.ClusterConditions[i%len(statuses.ClusterConditions)].OperationStateStartedAt = time.Now().UTC().Format(time.RFC3339Nano)
		data, err := json.Marshal(body)
		if err != nil {
			b.Fatal(err)
		}
		answer := &metav1.PartialObjectMetadata{
			TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "MulticlusterApplicationSetReport"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		}
		opts := []client.PatchOption{client.FieldOwner(appsetreport.FieldOwner)}
		if validation != "" {
			opts = append(opts, client.FieldValidation(validation))
		}
		if i == 0 || patchType == types.ApplyPatchType {
			// The first write creates the report; a merge patch cannot.
			opts = append(opts, client.ForceOwnership)
			err = c.Patch(ctx, answer, client.RawPatch(types.ApplyPatchType, data), opts...)
		} else {
			err = c.Patch(ctx, answer, client.RawPatch(patchType, data), opts...)
		}
		if err != nil {
			b.Fatal(err)
		}
		return len(data)
	}
	size := write(0) // the create is not measured
	measureWrites(b, write, size)
}

// measureWrites makes the benchmark's writes and reports the apiserver's CPU per write and the report's size.
func measureWrites(b *testing.B, write func(i int) int, size int) {
	pid := env.Hub.Pid()
	before := cpuTicks(b, pid)
	writes := 0
	for b.Loop() {
		writes++
		write(writes)
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTicks(b, pid)-before)*1000/100/float64(writes), "apiserver-ms/op")
	b.ReportMetric(float64(size), "report-bytes")
}

// midRollout is the status of a report of clusters Applications, listed ones not Synced/Healthy yet: each
// listed with its Application, hub Application, revision and the start of its operation, as a rollout shows them.
func midRollout(clusters, listed int) v1alpha1.AppConditions {
	st := v1alpha1.AppConditions{Summary: v1alpha1.ReportSummary{
		Clusters: strconv.Itoa(clusters), Synced: strconv.Itoa(clusters - listed), NotSynced: strconv.Itoa(listed),
		Healthy: strconv.Itoa(clusters - listed), NotHealthy: strconv.Itoa(listed), InProgress: strconv.Itoa(listed), Applications: strconv.Itoa(clusters),
	}}
	for _, kind := range []string{"ConfigMap", "Deployment", "Service", "ServiceAccount"} {
		st.Resources = append(st.Resources, v1alpha1.ResourceRef{APIVersion: "v1", Kind: kind, Name: "guestbook", Namespace: "guestbook"})
	}
	for i := range listed {
		cluster := fmt.Sprintf("cluster%d", i+1)
		st.ClusterConditions = append(st.ClusterConditions, v1alpha1.ClusterCondition{
			Cluster:                 cluster,
			App:                     fmt.Sprintf("argocd/%s-set-00/%s/argocd-%s-set-00-%010x", cluster, cluster, cluster, i),
			HubApplication:          cluster + "-set-00",
			SyncStatus:              "OutOfSync",
			HealthStatus:            "Progressing",
			SyncRevision:            strings.Repeat("0123456789", 4),
			OperationStatePhase:     "Running",
			OperationStateStartedAt: time.Now().UTC().Format(time.RFC3339),
		})
	}
	return st
}

// cpuTicks is the process's user and system CPU time in clock ticks (100 a second).
func cpuTicks(b *testing.B, pid int) int64 {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command, which is in parentheses: utime and stime are the 12th and 13th of them.
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	var ticks int64
	for _, f := range fields[11:13] {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		ticks += v
	}
	return ticks
}
