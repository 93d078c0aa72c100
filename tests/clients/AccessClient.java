// pgjdbc as one person against `archiver serve`: signs in with the person's own role and
// password, runs each statement given, prints one line per statement: "ok<TAB>rows" or
// "refused<TAB>SQLSTATE<TAB>message" (the connection kept for the next); a refused
// sign-in is one line, "signin<TAB>SQLSTATE<TAB>message".
// Usage: java AccessClient JDBC_URL USER PASSWORD SQL...
import java.sql.*;

public class AccessClient {
    public static void main(String[] args) throws Exception {
        Connection signedIn;
        try {
            signedIn = DriverManager.getConnection(args[0], args[1], args[2]);
        } catch (SQLException e) {
            String message = e.getMessage().split("\n")[0].replaceFirst("^FATAL: ", "");
            System.out.println("signin\t" + e.getSQLState() + "\t" + message);
            return;
        }
        try (Connection conn = signedIn) {
            DatabaseMetaData meta = conn.getMetaData();
            int tables = 0;
            try (ResultSet rs = meta.getTables(null, "public", "orders", new String[] {"TABLE"})) {
                while (rs.next()) tables++;
            }
            System.out.println("tables\t" + tables);
            for (int i = 3; i < args.length; i++) {
                try (PreparedStatement st = conn.prepareStatement(args[i]); ResultSet rs = st.executeQuery()) {
                    int rows = 0;
                    while (rs.next()) rows++;
                    System.out.println("ok\t" + rows);
                } catch (SQLException e) {
                    String message = e.getMessage().split("\n")[0].replaceFirst("^ERROR: ", "");
                    System.out.println("refused\t" + e.getSQLState() + "\t" + message);
                }
            }
        }
    }
}
