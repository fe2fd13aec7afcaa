// pgJDBC against a running Eddy: metadata calls and a prepared statement executed often
// enough (more than prepareThreshold = 5 times) that the driver switches to a named
// server-side statement with binary results.
import java.math.BigDecimal;
import java.sql.*;
import java.util.*;

public class JdbcClient {
    static void check(boolean ok, String what) {
        if (!ok) throw new AssertionError(what);
    }

    public static void main(String[] args) throws Exception {
        String url = "jdbc:postgresql://127.0.0.1:" + System.getenv("EDDY_PORT") + "/dev";
        try (Connection conn = DriverManager.getConnection(url, "root", "")) {
            try (Statement st = conn.createStatement()) {
                st.execute("CREATE TABLE jt (id INT PRIMARY KEY, name VARCHAR(20) NOT NULL, amount NUMERIC(10,2))");
                st.execute("INSERT INTO jt VALUES (1, 'ann', 1.50), (2, 'bob', 2.25)");
            }
            DatabaseMetaData md = conn.getMetaData();
            check(md.getDatabaseProductVersion().startsWith("15"), "product version " + md.getDatabaseProductVersion());

            List<String> tables = new ArrayList<>();
            try (ResultSet rs = md.getTables(null, "public", "%", new String[] {"TABLE"})) {
                while (rs.next()) tables.add(rs.getString("TABLE_NAME"));
            }
            check(tables.contains("jt"), "getTables: " + tables);

            List<String> columns = new ArrayList<>();
            try (ResultSet rs = md.getColumns(null, "public", "jt", "%")) {
                while (rs.next()) columns.add(rs.getString("COLUMN_NAME") + ":" + rs.getInt("NULLABLE"));
            }
            check(columns.equals(List.of("id:0", "name:0", "amount:1")), "getColumns: " + columns);

            List<String> keys = new ArrayList<>();
            try (ResultSet rs = md.getPrimaryKeys(null, "public", "jt")) {
                while (rs.next()) keys.add(rs.getString("COLUMN_NAME"));
            }
            check(keys.equals(List.of("id")), "getPrimaryKeys: " + keys);

            try (PreparedStatement ps = conn.prepareStatement("SELECT name, amount FROM jt WHERE id = ?")) {
                for (int i = 0; i < 8; i++) {
                    ps.setInt(1, 2);
                    try (ResultSet rs = ps.executeQuery()) {
                        check(rs.next(), "row for id 2");
                        check(rs.getString(1).equals("bob"), "name " + rs.getString(1));
                        check(rs.getBigDecimal(2).compareTo(new BigDecimal("2.25")) == 0, "amount " + rs.getBigDecimal(2));
                        check(!rs.next(), "one row");
                    }
                }
            }
            try (PreparedStatement ps = conn.prepareStatement("INSERT INTO jt VALUES (?, ?, ?)")) {
                for (int i = 10; i < 17; i++) {
                    ps.setInt(1, i);
                    ps.setString(2, "n" + i);
                    ps.setBigDecimal(3, new BigDecimal("0.5"));
                    check(ps.executeUpdate() == 1, "insert count");
                }
            }
            try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery("SELECT count(*) FROM jt")) {
                rs.next();
                check(rs.getLong(1) == 9, "count " + rs.getLong(1));
            }
        }
        System.out.println("jdbc ok");
    }
}
