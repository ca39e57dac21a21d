// Package wowtest makes Wow messages for tests and benchmarks: values
// shaped like the ones services on the Wow framework write to Kafka, of a
// realistic size, made quickly enough for a benchmark's million records.
package wowtest

import (
	"strconv"
)

// EventStream returns a domain event stream of one event, as a Wow service
// writes it to its aggregate's event topic: ids, the routing names, a
// header of three entries, tenant, owner, the command and request that
// produced it, the aggregate version, one cart_item_added event with a
// small body, and the creation time. With names as long as the examples'
// (example-service, cart, cart-00042) it is about 470 bytes; the message id
// derives from the aggregate id and version. The names are written as
// given: they must need no JSON escaping.
func EventStream(contextName, aggregateName, aggregateID string, version int64) []byte {
	return AppendEventStream(make([]byte, 0, 400+len(contextName)+len(aggregateName)+2*len(aggregateID)), contextName, aggregateName, aggregateID, version)
}

// AppendEventStream appends the value EventStream returns to v.
func AppendEventStream(v []byte, contextName, aggregateName, aggregateID string, version int64) []byte {
	id := uint64(14695981039346656037)
	for i := range len(aggregateID) {
		id = (id ^ uint64(aggregateID[i])) * 1099511628211
	}
	id ^= uint64(version) * 0x9e3779b97f4a7c15
	v = append(v, `{"id":"0U`...)
	v = strconv.AppendUint(v, id>>4, 36)
	v = append(v, `","contextName":"`...)
	v = append(v, contextName...)
	v = append(v, `","aggregateName":"`...)
	v = append(v, aggregateName...)
	v = append(v, `","header":{"trace_id":"0U7K3b1c`...)
	v = strconv.AppendInt(v, version, 10)
	v = append(v, `","upstream_name":"add_cart_item"},"aggregateId":"`...)
	v = append(v, aggregateID...)
	v = append(v, `","tenantId":"(0)","ownerId":"0U7K1user0009","spaceId":"","commandId":"0U7K3b1c`...)
	v = strconv.AppendInt(v, version, 10)
	v = append(v, `","requestId":"0U7K3b1c`...)
	v = strconv.AppendInt(v, version, 10)
	v = append(v, `","version":`...)
	v = strconv.AppendInt(v, version, 10)
	v = append(v, `,"body":[{"id":"0U7K3b2d`...)
	v = strconv.AppendInt(v, version, 10)
	v = append(v, `","name":"cart_item_added","revision":"0.0.1","bodyType":"cart.CartItemAdded","body":{"productId":"product-`...)
	v = strconv.AppendInt(v, version%997, 10)
	v = append(v, `","quantity":`...)
	v = strconv.AppendInt(v, 1+version%5, 10)
	v = append(v, `}}],"createTime":`...)
	v = strconv.AppendInt(v, 1755868600200+version, 10)
	return append(v, '}')
}
