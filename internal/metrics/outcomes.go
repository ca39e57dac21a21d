package metrics

import (
	dto "github.com/prometheus/client_model/go"
)

// Outcomes returns how many messages of a receiver ended in each outcome
// since the start, by outcome label value (wowd_messages_total), for the
// admin API's rates.
func (m *Metrics) Outcomes(dispatcher, context string) map[string]float64 {
	out := make(map[string]float64, numOutcomes)
	for o := range numOutcomes {
		var d dto.Metric
		if err := m.messages.WithLabelValues(dispatcher, context, o.String()).Write(&d); err == nil {
			out[o.String()] = d.GetCounter().GetValue()
		}
	}
	return out
}
