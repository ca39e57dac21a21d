package admin

import (
	"cmp"
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"fmt"
	"html/template"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/wowd/wowd/internal/printable"
)

//go:embed page.html
var pageSource string

// pageTmpl renders the status page ("page") and the part its script
// refreshes ("body"). Everything it needs is inline: the page works on a
// cluster without internet access.
var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{
	"dur":   seconds,
	"since": func(t time.Time) string { return seconds(time.Since(t).Seconds()) },
	"or0":   func(n int64) string { return orDash(n) },
	"rates": rates,
	"shown": shown,
	// seg: the page's actions name an aggregate ID by its bytes
	// percent-encoded as a URL path segment, which the script puts in the
	// action's URL as it is and the API decodes back to those bytes. The
	// raw ID in a data attribute would not do: a browser reads a page's
	// bytes that are not UTF-8 as U+FFFD, so the buttons of cart-\xff and
	// cart-\xfe would both act on cart-\uFFFD.
	"seg": url.PathEscape,
}).Parse(pageSource))

// shown is how the page shows an aggregate ID or a handler's reason, which
// producers and handlers choose: as wowd status and wowd parked do
// (printable.String).
func shown(s string) string { return printable.String(s) }

// pageRefresh is how often the page's script reloads its body.
const pageRefresh = 5 * time.Second

// view is what the page template renders.
type view struct {
	Status
	Authorized bool // the data may be shown; false: the page asks for the token
	TokenSet   bool // the listener requires a token
	ParkByHand bool // the park form is offered (also before the token is typed: the page is loaded without it)
	Refresh    int  // milliseconds between refreshes
	Generated  time.Time
	Top        int
	Nonce      string // of the page's script (Content-Security-Policy)
	// Parks and DeadLetters are the receivers' (ReceiverStatus) by
	// dispatcher: the park button is offered for aggregates of a
	// dispatcher that parks, skip and discard for one whose dead letters
	// are on (the others would answer 501).
	Parks, DeadLetters map[string]bool
}

// page serves GET /admin/: the whole page, or with ?part=body the part its
// script refreshes.
func (s *Server) page(w http.ResponseWriter, r *http.Request) {
	top, err := topParam(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	v := view{Authorized: s.authorized(r), TokenSet: s.o.Token != nil, Refresh: int(pageRefresh / time.Millisecond),
		Generated: time.Now(), Top: top, Nonce: nonce(), ParkByHand: s.o.Parked != nil && parksByHand(s.o.Parked)}
	if v.Authorized {
		v.Status = s.snapshot(top)
		v.Parked = s.parked(r)
		v.Parks, v.DeadLetters = map[string]bool{}, map[string]bool{}
		for _, rs := range v.Receivers {
			v.Parks[rs.Dispatcher] = v.Parks[rs.Dispatcher] || rs.Parks
			v.DeadLetters[rs.Dispatcher] = v.DeadLetters[rs.Dispatcher] || rs.DeadLetters
		}
	} else {
		v.Instance, v.Service = s.o.Instance, s.o.Service
	}
	name := "page"
	if r.URL.Query().Get("part") == "body" {
		name = "body"
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	// Nothing outside this page: no external script, style or frame.
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; script-src 'nonce-"+v.Nonce+"'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'none'; base-uri 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if err := pageTmpl.ExecuteTemplate(w, name, v); err != nil {
		s.log.Warn("rendering the status page", zap.Error(err))
	}
}

// nonce returns a fresh value for the Content-Security-Policy's script nonce.
func nonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.StdEncoding.EncodeToString(b[:])
}

// seconds formats a duration in seconds for people: 850ms, 42s, 3m05s,
// 2h10m, 3d4h.
func seconds(sec float64) string {
	switch d := time.Duration(sec * float64(time.Second)); {
	case sec <= 0 || math.IsNaN(sec):
		return "0s"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
	}
}

// rates formats outcome rates, most frequent first: "handled 12.0/s,
// retried 0.5/s".
func rates(r map[string]float64) string {
	if len(r) == 0 {
		return "no messages in the last minute"
	}
	names := slices.Collect(maps.Keys(r))
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(r[b], r[a]), strings.Compare(a, b)) })
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %.1f/s", n, r[n])
	}
	return strings.Join(parts, ", ")
}

// orDash shows -1 (unknown) as a dash.
func orDash(n int64) string {
	if n < 0 {
		return "–"
	}
	return fmt.Sprint(n)
}
