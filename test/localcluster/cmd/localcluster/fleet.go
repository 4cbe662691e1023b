package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fleet-controller-manager/fleet-controller-manager/membership"
	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// sampleWorkload creates a Deployment and a Service in a few namespaces, so
// that the demo shows pieces at work.
func sampleWorkload(ctx context.Context, cluster *localcluster.Cluster) error {
	client, err := cluster.Client()
	if err != nil {
		return err
	}
	fmt.Println("Creating a sample workload in namespaces demo-0..demo-4...")
	for i := range 5 {
		ns := fmt.Sprintf("demo-%d", i)
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating namespace %s: %w", ns, err)
		}
		labels := map[string]string{"app": "web"}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](3),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.invalid/web:1"}}},
				},
			},
		}
		if _, err := client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating deployment in %s: %w", ns, err)
		}
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
			Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 80}}},
		}
		if _, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating service in %s: %w", ns, err)
		}
	}
	return nil
}

// watchFleet prints the members, what each runs and its share of the
// objects in the partitions (the weights in their Leases) whenever that
// changes.
func watchFleet(ctx context.Context, cluster *localcluster.Cluster) {
	client, err := cluster.Client()
	if err != nil {
		return
	}
	last := ""
	for {
		leases, err := client.CoordinationV1().Leases("kube-system").List(ctx, metav1.ListOptions{LabelSelector: membership.FleetLabel})
		if err == nil {
			partitions, _, _ := shard.FleetPartitions(leases.Items, time.Now())
			status := shard.FleetStatusFromLeases(leases.Items, "kube-system", "", partitions, time.Now())
			var b strings.Builder
			w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "MEMBER\tSTATE\tPARTITIONS\tSHARE OF THE OBJECTS\tSINGLETONS")
			for _, m := range status.Members {
				singletons := make([]string, len(m.Singletons))
				for i, name := range m.Singletons {
					singletons[i] = strings.TrimSuffix(name, "-controller")
				}
				share := "-"
				if m.Measured > 0 {
					share = fmt.Sprintf("%.0f%%", 100*m.Share)
				}
				fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", m.Name, m.Health, len(m.Partitions), share, strings.Join(singletons, ","))
			}
			w.Flush()
			if status.Busiest > 0 {
				fmt.Fprintf(&b, "the busiest member holds %.2fx the mean of %d objects\n", status.Busiest, status.Objects)
			}
			if status.Balance != "" {
				fmt.Fprintln(&b, status.Balance)
			}
			if b.String() != last {
				last = b.String()
				fmt.Fprintf(os.Stdout, "\n%s fleet:\n%s", time.Now().Format("15:04:05"), last)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
	}
}
