package audit

import "fmt"

// Observer is shown every record the log accepted, in the order Observed was
// given its observers: the Tally, the Tap, the daemon's accounts. Observe
// must not block; the record must not be changed (copy what is kept).
type Observer interface {
	Observe(r *Record)
}

// Stamper is an Observer that also sets fields of a record before it is
// written (the daemon's owner and pod). Stamp must not block.
type Stamper interface {
	Stamp(r *Record)
}

// Observed is the one pass-through in front of the writer: it stamps each
// record (Stamper), writes it through next, and once next accepted it shows
// it to every observer. A refused record is observed by none. Reserve and Err
// pass next's through (a next that cannot reserve is an error: fail closed).
type Observed struct {
	next      Logger
	stampers  []Stamper
	observers []Observer
}

var (
	_ Reserver    = (*Observed)(nil)
	_ Health      = (*Observed)(nil)
	_ Reservation = (*observedReservation)(nil)
)

// Observe returns next with obs watching what it accepts.
func Observe(next Logger, obs ...Observer) *Observed {
	o := &Observed{next: next, observers: obs}
	for _, x := range obs {
		if s, ok := x.(Stamper); ok {
			o.stampers = append(o.stampers, s)
		}
	}
	return o
}

// Log stamps r, writes it, and shows it to the observers once accepted.
func (o *Observed) Log(r *Record) error {
	o.stamp(r)
	if err := o.next.Log(r); err != nil {
		return err
	}
	o.observe(r)
	return nil
}

// Reserve takes room through next; the reservation's record is stamped and
// observed as Log's is.
func (o *Observed) Reserve() (Reservation, error) {
	rs, ok := o.next.(Reserver)
	if !ok {
		return nil, fmt.Errorf("audit: %T cannot reserve room for a record", o.next)
	}
	res, err := rs.Reserve()
	if err != nil {
		return nil, err
	}
	return &observedReservation{o: o, next: res}, nil
}

// Err passes on next's health (see Writer.Err); a logger that cannot tell is
// taken as healthy, its Log errors still deny.
func (o *Observed) Err() error {
	if h, ok := o.next.(Health); ok {
		return h.Err()
	}
	return nil
}

func (o *Observed) stamp(r *Record) {
	if r == nil {
		return
	}
	for _, s := range o.stampers {
		s.Stamp(r)
	}
}

func (o *Observed) observe(r *Record) {
	if r == nil {
		return
	}
	for _, x := range o.observers {
		x.Observe(r)
	}
}

type observedReservation struct {
	o    *Observed
	next Reservation
}

func (r *observedReservation) Log(rec *Record) error {
	r.o.stamp(rec)
	if err := r.next.Log(rec); err != nil {
		return err
	}
	r.o.observe(rec)
	return nil
}

func (r *observedReservation) Cancel() { r.next.Cancel() }
