package lakehouse

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/catalog/hive"
	"github.com/apache/thrift/lib/go/thrift"
	"github.com/beltran/gohive/hive_metastore"
)

// openHive opens iceberg-go's Hive catalog on a Thrift connection with read
// and connect timeouts. iceberg-go dials its own without either (gohive's
// ConnectToMetastore): a call the metastore never answered read for ever,
// holding the one connection, so every call after it failed until floe was
// restarted. Thrift's binary protocol keeps reading past a read timeout
// while the call's context has time left, so with hiveReadTimeout a call
// ends at its deadline (serially gives every call one), and the connection
// it leaves out of step is dropped and dialed again.
func openHive(props iceberg.Properties) (catalog.Catalog, error) {
	client, err := dialHive(props[hive.URI])
	if err != nil {
		return nil, fmt.Errorf("failed to create Hive client: %w", err)
	}
	return hive.NewCatalogWithClient(client, props), nil
}

// hiveReadTimeout is how long one read of an answer waits before the call's
// deadline is looked at again; hiveConnectTimeout bounds a dial.
const (
	hiveReadTimeout    = time.Second
	hiveConnectTimeout = 30 * time.Second
)

// hiveClient is iceberg-go's hive.HiveClient on a Thrift connection floe
// dialed.
type hiveClient struct {
	*hive_metastore.ThriftHiveMetastoreClient
	trans thrift.TTransport
}

var _ hive.HiveClient = (*hiveClient)(nil)

// dialHive connects to the metastore at uri (thrift://host[:9083]), as
// iceberg-go does (binary transport, no SASL), with timeouts.
func dialHive(uri string) (*hiveClient, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return nil, fmt.Errorf("invalid URI: %w", err)
	}
	if u.Hostname() == "" {
		return nil, errors.New("invalid URI: host is required")
	}
	port := u.Port()
	if port == "" {
		port = "9083"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return nil, fmt.Errorf("invalid port: %s", port)
	}
	socket := thrift.NewTSocketConf(net.JoinHostPort(u.Hostname(), port), &thrift.TConfiguration{
		ConnectTimeout: hiveConnectTimeout,
		SocketTimeout:  hiveReadTimeout,
	})
	if err := socket.Open(); err != nil {
		return nil, fmt.Errorf("failed to connect to metastore: %w", err)
	}
	trans := thrift.NewTBufferedTransport(socket, 4096)
	return &hiveClient{
		ThriftHiveMetastoreClient: hive_metastore.NewThriftHiveMetastoreClientFactory(trans, thrift.NewTBinaryProtocolFactoryDefault()),
		trans:                     trans,
	}, nil
}

func (c *hiveClient) Close() error { return c.trans.Close() }

func (c *hiveClient) CheckLock(ctx context.Context, lockID int64) (*hive_metastore.LockResponse, error) {
	return c.ThriftHiveMetastoreClient.CheckLock(ctx, &hive_metastore.CheckLockRequest{Lockid: lockID})
}

func (c *hiveClient) Unlock(ctx context.Context, lockID int64) error {
	return c.ThriftHiveMetastoreClient.Unlock(ctx, &hive_metastore.UnlockRequest{Lockid: lockID})
}
