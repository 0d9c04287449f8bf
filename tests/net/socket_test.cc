// net/socket: TCP's self-connection, which a connect to a local port nobody listens on
// can produce, is recognised and refused.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <chrono>

#include <gtest/gtest.h>

#include "net/address.h"
#include "net/socket.h"

namespace remora::net {
namespace {

SockAddr loopback(uint16_t port) {
  SockAddr a;
  auto* in = reinterpret_cast<sockaddr_in*>(&a.storage);
  in->sin_family = AF_INET;
  in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  in->sin_port = htons(port);
  a.length = sizeof(sockaddr_in);
  return a;
}

uint16_t port_of(const SockAddr& a) { return ntohs(reinterpret_cast<const sockaddr_in*>(a.get())->sin_port); }

TEST(SelfConnection, ASocketConnectedToItsOwnPortIsRecognised) {
  // What the kernel can do to any connect to a free local port: source port = target
  // port. Made on purpose here, by binding the source port first.
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_TRUE(fd.valid());
  SockAddr any = loopback(0);
  ASSERT_EQ(::bind(fd.get(), any.get(), any.length), 0);
  auto bound = local_address(fd.get());
  ASSERT_TRUE(bound.is_ok()) << bound.status().to_string();
  const SockAddr self = loopback(port_of(*bound));
  ASSERT_EQ(::connect(fd.get(), self.get(), self.length), 0) << "no simultaneous open on this kernel";
  // It is connected, to itself: what it sends comes back to it.
  const std::array<char, 4> out = {'p', 'i', 'n', 'g'};
  std::array<char, 4> in{};
  ASSERT_EQ(::send(fd.get(), out.data(), out.size(), 0), 4);
  ASSERT_EQ(::recv(fd.get(), in.data(), in.size(), MSG_WAITALL), 4);
  EXPECT_EQ(in, out);
  EXPECT_TRUE(is_self_connected(fd.get()));
}

TEST(SelfConnection, AConnectionToAListenerIsNotOne) {
  auto listener = listen_tcp(loopback(0));
  ASSERT_TRUE(listener.is_ok()) << listener.status().to_string();
  auto where = local_address(listener->get());
  ASSERT_TRUE(where.is_ok());
  auto fd = connect_tcp(*where, Clock::now() + std::chrono::seconds(10));
  ASSERT_TRUE(fd.is_ok()) << fd.status().to_string();
  EXPECT_FALSE(is_self_connected(fd->get()));
}

TEST(SelfConnection, ConnectTcpToAPortNobodyListensOnIsUnreachable) {
  // Refused, or (had the kernel picked the same source port) self-connected: both are
  // kUnreachable, never a usable connection.
  SockAddr free_port;
  {
    auto probe = listen_tcp(loopback(0));
    ASSERT_TRUE(probe.is_ok());
    auto a = local_address(probe->get());
    ASSERT_TRUE(a.is_ok());
    free_port = *a;
  }  // closed: nobody listens there now
  auto fd = connect_tcp(free_port, Clock::now() + std::chrono::seconds(10));
  ASSERT_FALSE(fd.is_ok());
  EXPECT_EQ(fd.status().code(), StatusCode::kUnreachable) << fd.status().to_string();
}

}  // namespace
}  // namespace remora::net
