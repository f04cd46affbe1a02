import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.security.UserGroupInformation;

/**
 * Exits 0 once a file can be written through the DataNode, read back and
 * deleted by a Hadoop client logged in from a keytab: args[0] is the
 * principal, args[1] the keytab; core-site.xml and hdfs-site.xml come from
 * the classpath. start.sh --kerberos runs it to prove that Kerberos RPC
 * authentication and SASL data transfer protection both work (WebHDFS, used
 * under simple authentication, would need SPNEGO from curl).
 */
public class Probe {
    public static void main(String[] args) throws Exception {
        Configuration conf = new Configuration();
        UserGroupInformation.setConfiguration(conf);
        UserGroupInformation.loginUserFromKeytab(args[0], args[1]);
        Path p = new Path("/.floe-start-probe");
        byte[] want = "floe start probe".getBytes(StandardCharsets.UTF_8);
        try (FileSystem fs = FileSystem.get(conf)) {
            try (OutputStream out = fs.create(p, true)) {
                out.write(want);
            }
            ByteArrayOutputStream got = new ByteArrayOutputStream();
            try (InputStream in = fs.open(p)) {
                in.transferTo(got);
            }
            if (!got.toString(StandardCharsets.UTF_8).equals("floe start probe")) {
                System.err.println("probe: read back " + got + ", wrote floe start probe");
                System.exit(1);
            }
            if (!fs.delete(p, false)) {
                System.err.println("probe: could not delete " + p);
                System.exit(1);
            }
        }
        System.out.println("probe: wrote, read and deleted " + p + " as " + UserGroupInformation.getLoginUser());
    }
}
