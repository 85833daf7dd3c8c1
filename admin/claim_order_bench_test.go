package admin_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// BenchmarkPublishClaimOrderCost measures what ordering a publish's triggers by the database's
// collation (ClaimKeyOrder, one extra statement in the publish's transaction) costs beside the
// publish itself: per iteration, alternating in one sitting, A publishes n triggers of one project
// (each with a changed cron, so every schedule row is reset) and B runs ClaimKeyOrder alone for
// the same n keys on the admin role's handle. It reports both durations and B/A.
// Run: go test ./admin -run '^$' -bench BenchmarkPublishClaimOrderCost -benchtime 30x -count 1
func BenchmarkPublishClaimOrderCost(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("triggers_%d", n), func(b *testing.B) {
			ctx := context.Background()
			d := testpg.New(b)
			h := d.Handle(b, "ql_admin")
			pub := admin.NewPublisher(h)
			if _, err := pub.CreateProject(ctx, "p"); err != nil {
				b.Fatal(err)
			}
			if _, err := pub.PublishTask(ctx, admin.TaskSpec{Project: "p", Task: "task", ExecutorSpec: []byte(`{"image":"example/job:1"}`)}); err != nil {
				b.Fatal(err)
			}
			specs := make([]admin.TriggerSpec, n)
			p := db.ClaimKeyOrderParams{}
			for i := range specs {
				specs[i] = spec("p", fmt.Sprintf("t-%03d", n-i), "task", "* * * * *")
				p.ProjectIds, p.TriggerIds = append(p.ProjectIds, "p"), append(p.TriggerIds, specs[i].Trigger)
			}
			q := db.New(d.Pool(b, "ql_admin"))
			var publish, order time.Duration
			i := 0
			for b.Loop() {
				for k := range specs {
					specs[k].Cron = fmt.Sprintf("%d * * * *", i%60) // a change every time
				}
				i++
				start := time.Now()
				if _, err := pub.PublishTriggers(ctx, specs); err != nil {
					b.Fatal(err)
				}
				publish += time.Since(start)
				start = time.Now()
				if _, err := q.ClaimKeyOrder(ctx, p); err != nil {
					b.Fatal(err)
				}
				order += time.Since(start)
			}
			b.ReportMetric(float64(publish.Microseconds())/float64(i), "publish_us/op")
			b.ReportMetric(float64(order.Microseconds())/float64(i), "claim_order_us/op")
			b.ReportMetric(float64(order)/float64(publish), "order/publish")
		})
	}
}
