//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// busybox is the image bin/node-images holds under upstream's name.
const busybox = "registry.k8s.io/e2e-test-images/busybox:1.37.0-1"

// onRealNode puts a pod template on the real node: its taint keeps
// everything else on kwok's nodes.
func onRealNode(spec *corev1.PodSpec) {
	spec.NodeSelector = map[string]string{corev1.LabelHostname: localcluster.RealNodeName}
	spec.Tolerations = append(spec.Tolerations, localcluster.RealNodeToleration)
}

// checkJobsByExitCode runs Jobs whose containers really run on the real
// node: a container that exits 0 completes its Job, one that exits 3 fails
// its Job by the pod failure policy's rule for that code (which kwok's fake
// pods cannot exercise), and the container's output is read through the
// apiserver from the kubelet.
func checkJobsByExitCode(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string) {
	t.Helper()
	jobs := []struct {
		name, script string
		want         batchv1.JobConditionType
		wantReason   string
	}{
		{name: "succeeds", script: "echo hello from a real container; exit 0", want: batchv1.JobComplete},
		{name: "exits-3", script: "echo failing on purpose; exit 3", want: batchv1.JobFailed, wantReason: batchv1.JobReasonPodFailurePolicy},
	}
	for _, j := range jobs {
		createExitCodeJob(ctx, t, client, ns, j.name, j.script)
	}
	for _, j := range jobs {
		cond := waitJobFinished(ctx, t, client, ns, j.name)
		if cond.Type != j.want || (j.wantReason != "" && cond.Reason != j.wantReason) {
			t.Errorf("job %s: finished %s (%s: %s), want %s %s", j.name, cond.Type, cond.Reason, cond.Message, j.want, j.wantReason)
		}
	}
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=succeeds"})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("the succeeding Job's pods: %v (%d)", err, len(pods.Items))
	}
	pod := pods.Items[0]
	if pod.Spec.NodeName != localcluster.RealNodeName || pod.Status.Phase != corev1.PodSucceeded {
		t.Errorf("pod %s: node %q phase %s, want %s Succeeded", pod.Name, pod.Spec.NodeName, pod.Status.Phase, localcluster.RealNodeName)
	}
	logs, err := client.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("reading the container's output through the apiserver: %v", err)
	}
	if !strings.Contains(string(logs), "hello from a real container") {
		t.Errorf("container output %q, want the echoed line", logs)
	}
}

func createExitCodeJob(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, name, script string) {
	t.Helper()
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](2),
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
				Action:      batchv1.PodFailurePolicyActionFailJob,
				OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{3}},
			}}},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "main", Image: busybox, Command: []string{"sh", "-c", script}}},
			}},
		},
	}
	onRealNode(&job.Spec.Template.Spec)
	if _, err := client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating job %s: %v", name, err)
	}
}

// waitJobFinished is the Job's Complete or Failed condition once it has
// one.
func waitJobFinished(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, name string) batchv1.JobCondition {
	t.Helper()
	var finished batchv1.JobCondition
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		job, err := client.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range job.Status.Conditions {
			if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
				finished = c
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("job %s/%s did not finish: %v", ns, name, err)
	}
	return finished
}
