package main

import (
	"math"
	"strings"
	"testing"
)

func TestParseProcStat(t *testing.T) {
	for _, tc := range []struct {
		name       string
		data       string
		cpus       []int
		busy, idle float64
		err        string
	}{
		{
			name: "linux 2.6.33+",
			data: "cpu  100 5 50 800 40 3 2 0 0 0\ncpu0 50 2 25 400 20 1 1 0 0 0\nintr 1\n",
			busy: 160, idle: 840,
		},
		{name: "old kernel, four fields", data: "cpu 10 0 10 80\n", busy: 20, idle: 80},
		{name: "no aggregate line", data: "cpu0 1 2 3 4\n", err: "no aggregate cpu line"},
		{name: "garbage", data: "cpu 1 x 3 4\n", err: `field 2 "x"`},
		{
			name: "one CPU of two",
			data: "cpu  100 5 50 800 40 3 2 0 0 0\ncpu0 50 2 25 400 20 1 1 0 0 0\ncpu1 50 3 25 400 20 2 1 0 0 0\n",
			cpus: []int{1}, busy: 81, idle: 420,
		},
		{
			name: "two CPUs summed",
			data: "cpu  100 5 50 800 40 3 2 0 0 0\ncpu0 50 2 25 400 20 1 1 0 0 0\ncpu1 50 3 25 400 20 2 1 0 0 0\n",
			cpus: []int{0, 1}, busy: 160, idle: 840,
		},
		{name: "a CPU the machine lacks", data: "cpu 10 0 10 80\ncpu0 10 0 10 80\n", cpus: []int{0, 3}, err: "1 of the lines of CPUs [0 3]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcStat(tc.data, tc.cpus)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.busy != tc.busy || got.idle != tc.idle {
				t.Fatalf("busy %v idle %v, want %v %v", got.busy, got.idle, tc.busy, tc.idle)
			}
		})
	}
}

func TestLimiter(t *testing.T) {
	cm := func(n string) bool { return strings.HasPrefix(n, "fcm-") }
	for _, tc := range []struct {
		name  string
		cpu   map[string]float64
		busy  float64 // machine share, from /proc/stat
		cpuS  float64 // machine busy CPU-seconds
		split bool
		want  string
	}{
		{
			name: "busy machine: CPU, even when the processes started account for little",
			cpu:  map[string]float64{"fcm-0": 30, "kube-apiserver": 10},
			busy: 0.96, cpuS: 100,
			want: "CPU: machine 96% busy (/proc/stat), most in controller manager (30% of the machine's busy time); 60% not in the processes started",
		},
		{
			name: "idle machine: client rate limits",
			cpu:  map[string]float64{"fcm-0": 5, "kube-apiserver": 15},
			busy: 0.30, cpuS: 25,
			want: "client rate limits: machine 30% busy (/proc/stat), most in kube-apiserver (60% of the machine's busy time); 20% not in the processes started",
		},
		{
			name: "control plane on CPUs of its own: the controller managers' CPU left out",
			cpu:  map[string]float64{"fcm-0": 40, "kube-apiserver": 60, "etcd": 30},
			busy: 0.97, cpuS: 100, split: true,
			want: "CPU: control plane's CPUs 97% busy (/proc/stat), most in kube-apiserver (60% of the control plane's CPUs' busy time); 10% not in the processes started",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := limiter(tc.cpu, tc.busy, tc.cpuS, cm, tc.split); got != tc.want {
				t.Fatalf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestBusyBetween(t *testing.T) {
	share, seconds := busyBetween(machineCPU{busy: 100, idle: 100}, machineCPU{busy: 250, idle: 150})
	if math.Abs(share-0.75) > 1e-9 || math.Abs(seconds-1.5) > 1e-9 {
		t.Fatalf("share %v seconds %v, want 0.75 and 1.5", share, seconds)
	}
}
