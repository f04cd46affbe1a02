import org.apache.hadoop.hive.metastore.api.ThriftHiveMetastore;
import org.apache.thrift.protocol.TBinaryProtocol;
import org.apache.thrift.transport.TSocket;

/**
 * Exits 0 once the metastore at 127.0.0.1:args[0] answers a get_all_databases
 * Thrift call (plain binary protocol, no SASL: what iceberg-go and PyIceberg
 * speak) and lists the "default" database, 1 otherwise. start.sh runs it until
 * the metastore is ready: an open port is not enough.
 */
public class Ready {
    public static void main(String[] args) {
        TSocket socket = new TSocket("127.0.0.1", Integer.parseInt(args[0]), 3000);
        try {
            socket.open();
            ThriftHiveMetastore.Client client = new ThriftHiveMetastore.Client(new TBinaryProtocol(socket));
            if (!client.get_all_databases().contains("default")) {
                System.err.println("get_all_databases lacks the default database");
                System.exit(1);
            }
        } catch (Exception e) {
            System.err.println(e);
            System.exit(1);
        } finally {
            socket.close();
        }
    }
}
