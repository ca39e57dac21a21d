// Package kfaketest injects broker faults into a kfake cluster for tests.
package kfaketest

import (
	"net"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Leaderless makes c answer a metadata request that names topic, and that
// when (nil: any) accepts, with LEADER_NOT_AVAILABLE for topic, as while
// its leader moves; the request's other topics are answered with one
// partition led by the first broker. Other requests are answered as usual.
// It lasts as long as the cluster.
func Leaderless(c *kfake.Cluster, topic string, when func(*kmsg.MetadataRequest) bool) {
	host, port, _ := net.SplitHostPort(c.ListenAddrs()[0])
	portN, _ := strconv.Atoi(port)
	c.ControlKey(int16(kmsg.Metadata), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.MetadataRequest)
		names := false
		for _, rt := range req.Topics {
			if rt.Topic != nil && *rt.Topic == topic {
				names = true
			}
		}
		if !names || (when != nil && !when(req)) {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.MetadataResponse)
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID, b.Host, b.Port = 0, host, int32(portN)
		resp.Brokers, resp.ControllerID = append(resp.Brokers, b), 0
		for _, rt := range req.Topics {
			st := kmsg.NewMetadataResponseTopic()
			if rt.Topic == nil {
				continue
			}
			st.Topic = kmsg.StringPtr(*rt.Topic)
			if *rt.Topic == topic {
				st.ErrorCode = kerr.LeaderNotAvailable.Code
			} else {
				sp := kmsg.NewMetadataResponseTopicPartition()
				sp.Partition, sp.Leader = 0, 0
				sp.Replicas, sp.ISR = []int32{0}, []int32{0}
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}
