import java.io.FileInputStream;
import java.util.Collection;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.common.Node;

/**
 * Exits 0 once the broker at args[0] answers a metadata request (Admin
 * describeCluster lists a node and a controller), 1 otherwise. args[1], if
 * given, is a client properties file (e.g. SASL_SSL settings). start.sh runs
 * it repeatedly until the broker is ready: the port being open is not enough,
 * a KRaft broker accepts connections before it has caught up with the
 * metadata log and been unfenced.
 */
public class Ready {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        if (args.length > 1) {
            try (FileInputStream in = new FileInputStream(args[1])) {
                props.load(in);
            }
        }
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "3000");
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "4000");
        try (Admin admin = Admin.create(props)) {
            Collection<Node> nodes = admin.describeCluster().nodes().get(5, TimeUnit.SECONDS);
            Node controller = admin.describeCluster().controller().get(5, TimeUnit.SECONDS);
            if (nodes.isEmpty() || controller == null || controller.isEmpty()) {
                System.err.println("no broker or controller in the metadata yet");
                System.exit(1);
            }
            System.out.println("brokers " + nodes + ", controller " + controller);
        } catch (Exception e) {
            System.err.println("not ready: " + e);
            System.exit(1);
        }
    }
}
