package metrics

import (
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// Doc describes one metric wowd exports.
type Doc struct {
	Name   string
	Type   string // counter, gauge or histogram
	Labels []string
	Help   string
}

// Catalog returns every wowd_ metric (not the Go runtime's, the process's or
// the Kafka client's), read from the definitions themselves: it builds a
// registry, gives every family one sample and gathers it.
func Catalog() []Doc {
	m := New("catalog")
	r := m.Receiver("d", "c", "h", catalogSource{})
	for o := range numOutcomes {
		r.Count(o, 1)
	}
	r.HandlerDuration(0)
	r.Commit(true)
	r.Assigned(1)
	r.Backoff()
	r.Timeout()
	r.Panic()
	r.Rewind()
	r.ParkAction("park", "done")
	m.Ingest().Count(IngestAccepted)
	m.Reloads().Count(ReloadApplied)
	m.Executor(func() ExecutorSnapshot { return ExecutorSnapshot{} })
	mfs, err := m.Registry.Gather()
	if err != nil {
		panic(err) // the definitions are static: a failure is a programming error
	}
	var docs []Doc
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasPrefix(name, Namespace+"_") {
			continue
		}
		d := Doc{Name: name, Type: strings.ToLower(mf.GetType().String()), Help: mf.GetHelp()}
		if len(mf.Metric) > 0 {
			d.Labels = labelNames(mf.Metric[0])
		}
		docs = append(docs, d)
	}
	sort.Slice(docs, func(i, j int) bool { return docs[i].Name < docs[j].Name })
	return docs
}

func labelNames(m *dto.Metric) []string {
	var ls []string
	for _, l := range m.GetLabel() {
		ls = append(ls, l.GetName())
	}
	return ls
}

type catalogSource struct{}

func (catalogSource) Snapshot() ReceiverSnapshot { return ReceiverSnapshot{} }
