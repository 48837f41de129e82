/** An error message shown as an alert banner (screen readers announce it); nothing when `message` is empty. */
export function ErrorBanner({ message, testId }: { message: string | null | undefined; testId?: string }) {
  if (!message) return null;
  return (
    <div className="banner error" role="alert" data-testid={testId}>
      {message}
    </div>
  );
}
