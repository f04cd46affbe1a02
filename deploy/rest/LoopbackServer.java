package org.apache.iceberg.rest;

import java.lang.reflect.Method;
import org.apache.iceberg.util.PropertyUtil;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import org.eclipse.jetty.server.handler.gzip.GzipHandler;
import org.eclipse.jetty.servlet.ServletContextHandler;
import org.eclipse.jetty.servlet.ServletHolder;

/**
 * Runs Iceberg's REST catalog fixture exactly as RESTCatalogServer.main does
 * (the same backend catalog from the CATALOG_* environment, the same adapter,
 * servlet and gzip handler) but listening on 127.0.0.1 only: the fixture's
 * own Jetty server binds every interface and has no setting for the host.
 * It lives in the fixture's package to reach its package-private classes.
 */
public class LoopbackServer {
    public static void main(String[] args) throws Exception {
        RESTCatalogServer fixture = new RESTCatalogServer();
        Method init = RESTCatalogServer.class.getDeclaredMethod("initializeBackendCatalog");
        init.setAccessible(true);
        RESTCatalogServer.CatalogContext ctx = (RESTCatalogServer.CatalogContext) init.invoke(fixture);

        ServletContextHandler context = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
        context.addServlet(new ServletHolder(new RESTCatalogServlet(new RESTServerCatalogAdapter(ctx))), "/*");
        context.insertHandler(new GzipHandler());

        Server server = new Server();
        ServerConnector connector = new ServerConnector(server);
        connector.setHost("127.0.0.1");
        connector.setPort(PropertyUtil.propertyAsInt(ctx.configuration(), RESTCatalogServer.REST_PORT, 8181));
        server.addConnector(connector);
        server.setHandler(context);
        server.start();
        server.join();
    }
}
