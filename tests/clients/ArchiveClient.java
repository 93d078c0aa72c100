// pgjdbc against `archiver serve`, as DBeaver, Metabase, Tableau and DataGrip use it:
// the calls their navigators and syncs make (DatabaseMetaData), a prepared statement run
// past the driver's server-prepare threshold (then binary transfer), result metadata,
// and a bad statement after which the connection goes on. Each answer is one line,
// tab-separated, for tests/test_serve_clients.py to compare with the source.
// Usage: java -cp postgresql.jar:. ArchiveClient URL USER PASSWORD ID...
import java.sql.*;
import java.util.*;

public class ArchiveClient {
    static void say(Object... parts) {
        StringBuilder line = new StringBuilder();
        for (int i = 0; i < parts.length; i++) {
            if (i > 0) line.append('\t');
            line.append(parts[i]);
        }
        System.out.println(line);
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.setProperty("user", args[1]);
        props.setProperty("password", args[2]);
        props.setProperty("sslmode", "disable");
        props.setProperty("prepareThreshold", "3");
        try (Connection conn = DriverManager.getConnection(args[0], props)) {
            DatabaseMetaData meta = conn.getMetaData();
            say("product", meta.getDatabaseProductName(), meta.getDatabaseProductVersion(),
                meta.getDatabaseMajorVersion());
            try (ResultSet rs = meta.getCatalogs()) {
                while (rs.next()) say("catalog", rs.getString("TABLE_CAT"));
            }
            try (ResultSet rs = meta.getSchemas()) {
                while (rs.next()) say("schema", rs.getString("TABLE_SCHEM"));
            }
            try (ResultSet rs = meta.getTables(null, null, "%", new String[] {"TABLE", "VIEW"})) {
                while (rs.next())
                    say("table", rs.getString("TABLE_SCHEM"), rs.getString("TABLE_NAME"),
                        rs.getString("TABLE_TYPE"), rs.getString("REMARKS"));
            }
            try (ResultSet rs = meta.getColumns(null, "public", "orders", "%")) {
                while (rs.next())
                    say("column", rs.getString("COLUMN_NAME"), rs.getString("TYPE_NAME"),
                        rs.getInt("DATA_TYPE"), rs.getInt("COLUMN_SIZE"), rs.getInt("DECIMAL_DIGITS"),
                        rs.getString("IS_NULLABLE"), rs.getInt("ORDINAL_POSITION"));
            }
            try (ResultSet rs = meta.getPrimaryKeys(null, "public", "orders")) {
                while (rs.next()) say("key", rs.getString("COLUMN_NAME"), rs.getInt("KEY_SEQ"));
            }
            try (ResultSet rs = meta.getIndexInfo(null, "public", "orders", false, true)) {
                while (rs.next())
                    if (rs.getString("INDEX_NAME") != null)
                        say("index", rs.getString("INDEX_NAME"), rs.getString("COLUMN_NAME"));
            }
            String lookup = "SELECT id, status, total, created_at, tags FROM orders WHERE id = ?";
            try (PreparedStatement ps = conn.prepareStatement(lookup)) {
                for (int round = 0; round < 3; round++) {
                    for (int i = 3; i < args.length; i++) {
                        ps.setLong(1, Long.parseLong(args[i]));
                        try (ResultSet rs = ps.executeQuery()) {
                            while (rs.next()) {
                                Array tags = rs.getArray(5);
                                say("row", round, rs.getLong(1), rs.getString(2), rs.getBigDecimal(3),
                                    rs.getTimestamp(4).toInstant(),
                                    tags == null ? "null" : Arrays.toString((Object[]) tags.getArray()));
                            }
                            if (round == 2 && i == 3) {
                                ResultSetMetaData md = rs.getMetaData();
                                for (int c = 1; c <= md.getColumnCount(); c++)
                                    say("result", md.getColumnName(c), md.getColumnTypeName(c),
                                        md.getColumnType(c), md.getPrecision(c), md.getScale(c),
                                        md.isNullable(c), md.getTableName(c));
                            }
                        }
                    }
                }
            }
            try (Statement st = conn.createStatement()) {
                try {
                    st.executeQuery("SELECT no_such_column FROM orders");
                    say("bad", "none");
                } catch (SQLException e) {
                    say("bad", e.getSQLState());
                }
                try (ResultSet rs = st.executeQuery("SELECT count(*) FROM orders")) {
                    rs.next();
                    say("count", rs.getLong(1));
                }
            }
        }
    }
}
