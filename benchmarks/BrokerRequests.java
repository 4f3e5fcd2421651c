// The requests a Kafka broker has answered, by request type: its own RequestMetrics
// (kafka.network:type=RequestMetrics,name=RequestsPerSec, attribute Count), read through
// the JVM's local management agent (the attach API: no JMX port to open).
//
//     java benchmarks/BrokerRequests.java <broker pid>...
//
// prints one line per request type, "<type> <count>", summed over the brokers and the versions.
import com.sun.tools.attach.VirtualMachine;
import java.util.Map;
import java.util.TreeMap;
import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

public class BrokerRequests {
    public static void main(String[] pids) throws Exception {
        Map<String, Long> counts = new TreeMap<>();
        ObjectName pattern = new ObjectName("kafka.network:type=RequestMetrics,name=RequestsPerSec,*");
        for (String pid : pids) {
            VirtualMachine vm = VirtualMachine.attach(pid);
            try (JMXConnector jmx = JMXConnectorFactory.connect(new JMXServiceURL(vm.startLocalManagementAgent()))) {
                MBeanServerConnection server = jmx.getMBeanServerConnection();
                for (ObjectName name : server.queryNames(pattern, null)) {
                    long count = ((Number) server.getAttribute(name, "Count")).longValue();
                    counts.merge(name.getKeyProperty("request"), count, Long::sum);
                }
            } finally {
                vm.detach();
            }
        }
        counts.forEach((request, count) -> System.out.println(request + " " + count));
    }
}
