// Command netpol-eval answers whether connections are allowed by Kubernetes NetworkPolicies,
// with the verdict code of SIG Network's reference implementation
// (sigs.k8s.io/kube-network-policies, the packet evaluation its dataplane calls per new
// connection). It reads one JSON document on stdin:
//
//	{"namespaces": [Namespace...], "pods": [Pod... with status.podIPs],
//	 "policies": [NetworkPolicy...],
//	 "queries": [{"from": "ns/pod", "to": "ns/pod", "port": 8000, "protocol": "TCP"}]}
//
// and writes {"allowed": [bool per query]} on stdout. No cluster is contacted: the objects go
// straight into the controller's informer caches (a fake clientset backs the informers).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"

	v1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/kube-network-policies/pkg/networkpolicy"
)

// maxInput bounds what is read from stdin.
const maxInput = 16 << 20

type query struct {
	From     string      `json:"from"`
	To       string      `json:"to"`
	Port     int         `json:"port"`
	Protocol v1.Protocol `json:"protocol"`
}

type input struct {
	Namespaces []v1.Namespace               `json:"namespaces"`
	Pods       []v1.Pod                     `json:"pods"`
	Policies   []networkingv1.NetworkPolicy `json:"policies"`
	Queries    []query                      `json:"queries"`
}

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "netpol-eval:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	raw, err := io.ReadAll(io.LimitReader(in, maxInput+1))
	if err != nil {
		return err
	}
	if len(raw) > maxInput {
		return fmt.Errorf("input over %d bytes", maxInput)
	}
	var doc input
	if err := json.Unmarshal(raw, &doc); err != nil {
		return err
	}
	client := fake.NewSimpleClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	pods := factory.Core().V1().Pods()
	namespaces := factory.Core().V1().Namespaces()
	policies := factory.Networking().V1().NetworkPolicies()
	config := networkpolicy.Config{NodeName: "evaluator", NRIdisabled: true}
	controller, err := networkpolicy.NewController(
		client, policies, namespaces, pods, nil, nil, nil, nil, config,
	)
	if err != nil {
		return err
	}
	byName := map[string]*v1.Pod{}
	for i := range doc.Namespaces {
		if err := namespaces.Informer().GetIndexer().Add(&doc.Namespaces[i]); err != nil {
			return err
		}
	}
	for i := range doc.Pods {
		pod := &doc.Pods[i]
		if err := pods.Informer().GetIndexer().Add(pod); err != nil {
			return err
		}
		byName[pod.Namespace+"/"+pod.Name] = pod
	}
	for i := range doc.Policies {
		if err := policies.Informer().GetIndexer().Add(&doc.Policies[i]); err != nil {
			return err
		}
	}
	allowed := make([]bool, 0, len(doc.Queries))
	ctx := context.Background()
	for _, q := range doc.Queries {
		src, dst := byName[q.From], byName[q.To]
		if src == nil || dst == nil || len(src.Status.PodIPs) == 0 || len(dst.Status.PodIPs) == 0 {
			return fmt.Errorf("query %s -> %s: both pods must be given, with status.podIPs", q.From, q.To)
		}
		proto := q.Protocol
		if proto == "" {
			proto = v1.ProtocolTCP
		}
		srcIP := net.ParseIP(src.Status.PodIPs[0].IP)
		dstIP := net.ParseIP(dst.Status.PodIPs[0].IP)
		if srcIP == nil || dstIP == nil {
			return fmt.Errorf("query %s -> %s: a pod IP does not parse", q.From, q.To)
		}
		allowed = append(allowed, controller.SparkrunVerdict(ctx, srcIP, dstIP, q.Port, proto))
	}
	return json.NewEncoder(out).Encode(map[string][]bool{"allowed": allowed})
}
