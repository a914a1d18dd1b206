package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func main() {
	addr := flag.String("addr", "", "host:port of the gRPC server")
	method := flag.String("method", "check", "check or watch")
	name := flag.String("name", "", "the key printed (default the method)")
	n := flag.Int("n", 1, "calls on one connection")
	flag.Parse()
	if *name == "" {
		*name = *method
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})))
	if err != nil {
		fmt.Printf("%s_error=%v\n", *name, err)
		os.Exit(0)
	}
	defer conn.Close()
	c := healthpb.NewHealthClient(conn)
	for i := 0; i < *n; i++ {
		var got healthpb.HealthCheckResponse_ServingStatus
		switch *method {
		case "check":
			r, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
			if err != nil {
				fmt.Printf("%s_error=%s\n", *name, status.Code(err))
				return
			}
			got = r.GetStatus()
		case "watch":
			s, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
			if err == nil {
				var r *healthpb.HealthCheckResponse
				if r, err = s.Recv(); err == nil {
					got = r.GetStatus()
				}
			}
			if err != nil {
				fmt.Printf("%s_error=%s\n", *name, status.Code(err))
				return
			}
		default:
			fmt.Fprintf(os.Stderr, "grpcclient: unknown method %q\n", *method)
			os.Exit(2)
		}
		if i == *n-1 {
			fmt.Printf("%s=%s\n", *name, got)
		}
	}
}
